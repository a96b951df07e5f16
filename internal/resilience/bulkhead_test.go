package resilience

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestBulkhead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		wait         time.Duration
		releaseAfter time.Duration // 0: the held slot stays held
		cancelAfter  time.Duration // 0: the caller waits as long as allowed
		wantErr      error
		wantElapsed  time.Duration
	}{
		{"full, no wait: rejects at once", 0, 0, 0, ErrBulkheadFull, 0},
		{"full for the whole wait: rejects after it", 50 * time.Millisecond, 0, 0, ErrBulkheadFull, 50 * time.Millisecond},
		{"a slot frees up during the wait", 50 * time.Millisecond, 30 * time.Millisecond, 0, nil, 30 * time.Millisecond},
		{"the caller gives up while waiting", 50 * time.Millisecond, 0, 10 * time.Millisecond, context.Canceled, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				inUse := prometheus.NewGauge(prometheus.GaugeOpts{Name: "in_use"})
				rejected := prometheus.NewCounter(prometheus.CounterOpts{Name: "rejected"})
				b := newBulkhead(1, tt.wait, inUse, rejected)
				if err := b.acquire(context.Background()); err != nil {
					t.Fatalf("first acquire = %v, want nil", err)
				}
				if tt.releaseAfter > 0 {
					time.AfterFunc(tt.releaseAfter, b.release)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tt.cancelAfter > 0 {
					time.AfterFunc(tt.cancelAfter, cancel)
				}

				start := time.Now()
				err := b.acquire(ctx)
				if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
					t.Errorf("acquire = %v, want %v", err, tt.wantErr)
				}
				if got, want := time.Since(start), tt.wantElapsed; got != want {
					t.Errorf("returned after %v, want %v", got, want)
				}
				if got, want := counterValue(t, inUse), 1.0; got != want {
					t.Errorf("in use = %v, want %v", got, want)
				}
				wantRejected := 0.0
				if errors.Is(tt.wantErr, ErrBulkheadFull) {
					wantRejected = 1
				}
				if got := counterValue(t, rejected); got != wantRejected {
					t.Errorf("rejected = %v, want %v", got, wantRejected)
				}
			})
		})
	}
}

func TestHealthPoolAnswersWhileAPIPoolSaturated(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m, err := NewMetrics(nil)
		if err != nil {
			t.Fatal(err)
		}
		api, err := NewPool("api", PoolConfig{Size: 2, MaxWait: time.Second}, m, shed)
		if err != nil {
			t.Fatal(err)
		}
		health, err := NewPool("health", DefaultHealthPool(), m, shed)
		if err != nil {
			t.Fatal(err)
		}
		// Business requests hang, as they do behind an unprotected hung
		// provider; /health touches nothing.
		hung := make(chan struct{})
		mux := http.NewServeMux()
		mux.Handle("/orders", api.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-hung
		})))
		mux.Handle("/health", health.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"status":"ok"}`)
		})))
		serve := func(path string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			return rec
		}

		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { serve("/orders") })
		}
		synctest.Wait() // the API pool is full

		start := time.Now()
		if rec := serve("/health"); rec.Code != http.StatusOK {
			t.Errorf("/health = %d, want 200", rec.Code)
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("/health took %v, want no wait", got)
		}

		rec := serve("/orders")
		if got, want := time.Since(start), time.Second; got != want {
			t.Errorf("saturated /orders answered after %v, want %v (the queue wait)", got, want)
		}
		if got, want := rec.Code, http.StatusServiceUnavailable; got != want {
			t.Errorf("saturated /orders = %d, want %d", got, want)
		}
		for header, want := range map[string]string{"Content-Type": "application/problem+json", "Retry-After": "1"} {
			if got := rec.Header().Get(header); got != want {
				t.Errorf("%s = %q, want %q", header, got, want)
			}
		}
		if got, want := counterValue(t, m.poolRejected.WithLabelValues("api")), 1.0; got != want {
			t.Errorf("http_pool_rejected_total{api} = %v, want %v", got, want)
		}
		if got, want := counterValue(t, m.poolInUse.WithLabelValues("api")), 2.0; got != want {
			t.Errorf("http_pool_in_use{api} = %v, want %v", got, want)
		}
		close(hung)
		wg.Wait()
	})
}
