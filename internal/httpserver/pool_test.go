package httpserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPoolWaitsBoundedly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		wait         time.Duration
		releaseAfter time.Duration // 0: the held slot stays held
		cancelAfter  time.Duration // 0: the caller waits as long as allowed
		wantSlot     bool
		wantElapsed  time.Duration
	}{
		{"full, no wait: sheds at once", 0, 0, 0, false, 0},
		{"full for the whole wait: sheds after it", 50 * time.Millisecond, 0, 0, false, 50 * time.Millisecond},
		{"a slot frees up during the wait", 50 * time.Millisecond, 30 * time.Millisecond, 0, true, 30 * time.Millisecond},
		{"the client gives up while waiting", 50 * time.Millisecond, 0, 10 * time.Millisecond, false, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				m, _ := NewPoolMetrics(nil)
				b, err := NewPool("api", PoolConfig{Size: 1, MaxWait: tt.wait}, m, shed)
				if err != nil {
					t.Fatal(err)
				}
				inUse, rejected := m.inUse.WithLabelValues("api"), m.rejected.WithLabelValues("api")
				if !b.acquire(context.Background()) {
					t.Fatal("first acquire refused")
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
				if got := b.acquire(ctx); got != tt.wantSlot {
					t.Errorf("acquire = %v, want %v", got, tt.wantSlot)
				}
				if got, want := time.Since(start), tt.wantElapsed; got != want {
					t.Errorf("returned after %v, want %v", got, want)
				}
				if got, want := testutil.ToFloat64(inUse), 1.0; got != want {
					t.Errorf("in use = %v, want %v", got, want)
				}
				wantRejected := 0.0
				if !tt.wantSlot && tt.cancelAfter == 0 {
					wantRejected = 1
				}
				if got := testutil.ToFloat64(rejected); got != wantRejected {
					t.Errorf("rejected = %v, want %v", got, wantRejected)
				}
			})
		})
	}
}

func TestHealthPoolAnswersWhileAPIPoolSaturated(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m, err := NewPoolMetrics(nil)
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
		if got, want := testutil.ToFloat64(m.rejected.WithLabelValues("api")), 1.0; got != want {
			t.Errorf("http_pool_rejected_total{api} = %v, want %v", got, want)
		}
		if got, want := testutil.ToFloat64(m.inUse.WithLabelValues("api")), 2.0; got != want {
			t.Errorf("http_pool_in_use{api} = %v, want %v", got, want)
		}
		close(hung)
		wg.Wait()
	})
}

func TestPoolConfigValidate(t *testing.T) {
	t.Parallel()
	for _, cfg := range []PoolConfig{{Size: 0}, {Size: 1, MaxWait: -1}} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil, want an error", cfg)
		}
	}
	for _, cfg := range []PoolConfig{DefaultAPIPool(), DefaultHealthPool(), {Size: 1}} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v, want nil", cfg, err)
		}
	}
}

// shed is the answer the tests' pools give a request they shed, as a
// service's own 503 would be (checkout's is api.PoolFull).
func shed(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
}
