package experiment

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestSchedule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		interval time.Duration
		d        time.Duration
		wantN    int
		wantLast time.Duration
	}{
		{"checkout at 20 req/s for 6 s", 50 * time.Millisecond, 6 * time.Second, 120, 5950 * time.Millisecond},
		{"checkout at 40 req/s for 6 s", 25 * time.Millisecond, 6 * time.Second, 240, 5975 * time.Millisecond},
		{"/health every 250 ms for 6 s", 250 * time.Millisecond, 6 * time.Second, 24, 5750 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := schedule(tt.interval, tt.d)
			if len(got) != tt.wantN || got[0] != 0 || got[len(got)-1] != tt.wantLast {
				t.Errorf("schedule(%v, %v) has %d offsets from %v to %v, want %d from 0 to %v",
					tt.interval, tt.d, len(got), got[0], got[len(got)-1], tt.wantN, tt.wantLast)
			}
		})
	}
}

func TestRampSchedule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		r0, r1 float64
		d      time.Duration
		wantN  int // the ramp's integral: (r0 + r1) / 2 × d
	}{
		{"the experiment's ramp, 10 → 80 req/s over 20 s", 10, 80, 20 * time.Second, 900},
		{"flat", 20, 20, 6 * time.Second, 120},
		{"down to 0", 40, 0, 2 * time.Second, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := rampSchedule(tt.r0, tt.r1, tt.d)
			if len(got) < tt.wantN-1 || len(got) > tt.wantN+1 || got[0] != 0 || got[len(got)-1] >= tt.d {
				t.Fatalf("rampSchedule has %d offsets from %v to %v, want about %d within %v", len(got), got[0], got[len(got)-1], tt.wantN, tt.d)
			}
			// The rate in each second is the ramp's at that second's middle.
			perSecond := make([]int, int(tt.d/time.Second))
			for i, at := range got {
				if i > 0 && at <= got[i-1] {
					t.Fatalf("offset %d (%v) not after %v", i, at, got[i-1])
				}
				perSecond[at/time.Second]++
			}
			for sec, n := range perSecond {
				want := tt.r0 + (tt.r1-tt.r0)*(float64(sec)+0.5)/tt.d.Seconds()
				if math.Abs(float64(n)-want) > 1 {
					t.Errorf("second %d: %d requests, want %.1f", sec, n, want)
				}
			}
		})
	}
}

// TestDispatchFiresOnSchedule checks, in a bubble with a fake clock, that every request is
// started at its offset and not after the previous one has finished (open loop).
func TestDispatchFiresOnSchedule(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now().Add(100 * time.Millisecond)
		offsets := schedule(50*time.Millisecond, time.Second)
		fired := make([]time.Duration, len(offsets))
		var wg sync.WaitGroup
		dispatch(t.Context(), &wg, start, offsets, func(i int, _ time.Duration) {
			fired[i] = time.Since(start)
			time.Sleep(3 * time.Second) // a slow answer must not hold up the next request
		})
		wg.Wait()
		for i, at := range offsets {
			if fired[i] != at {
				t.Errorf("request %d fired at %v, want %v", i, fired[i], at)
			}
		}
	})
}

func TestDispatchStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var wg sync.WaitGroup
		var n atomic.Int32
		time.AfterFunc(120*time.Millisecond, cancel)
		dispatch(ctx, &wg, start, schedule(50*time.Millisecond, time.Second), func(int, time.Duration) { n.Add(1) })
		wg.Wait()
		if got, want := n.Load(), int32(3); got != want {
			t.Errorf("fired %d requests before cancellation, want %d (at 0, 50 ms, 100 ms)", got, want)
		}
	})
}

func TestOrderID(t *testing.T) {
	t.Parallel()
	const id = "0b6f2a9e-4c1d-4e7a-9a51-3f2d1c0b9e8a"
	tests := []struct {
		name     string
		body     string
		location string
		want     string
	}{
		{"order", `{"id":"` + id + `","status":"paid"}`, "/orders/" + id, id},
		{"decline problem", `{"type":"about:blank","status":402,"order_id":"` + id + `"}`, "", id},
		{"location only", `not json`, "http://localhost:8080/orders/" + id, id},
		{"nothing", `{}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := orderID([]byte(tt.body), tt.location); got != tt.want {
				t.Errorf("orderID() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPlaceOrder(t *testing.T) {
	t.Parallel()
	const id = "0b6f2a9e-4c1d-4e7a-9a51-3f2d1c0b9e8a"
	var mu sync.Mutex
	keys := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body orderBody
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if body.CustomerID != "experiment-run1" || r.URL.Path != "/orders" {
			http.Error(w, "unexpected order", http.StatusBadRequest)
			return
		}
		mu.Lock()
		keys[r.Header.Get("Idempotency-Key")] = true
		mu.Unlock()
		switch r.Header.Get("Idempotency-Key") {
		case "run1-0":
			w.Header().Set("Location", "/orders/"+id)
			w.Header().Set("Catalog-Prices", "stale; age=95")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"id":"` + id + `","status":"pending_payment"}`))
		case "run1-1":
			w.Header().Set("Retry-After", "2")
			http.Error(w, "saturated", http.StatusServiceUnavailable)
		default:
			<-r.Context().Done() // a provider-bound request that never answers in time
		}
	}))
	t.Cleanup(srv.Close)

	cfg := DefaultConfig()
	cfg.CheckoutURL = srv.URL
	cfg.RequestTimeout = 50 * time.Millisecond
	l := newLoad(cfg, "run1")
	start := time.Now()
	tests := []struct {
		i              int
		wantOutcome    string
		wantOrder      string
		wantStale      bool
		wantRetryAfter string
	}{
		{0, "202", id, true, ""},
		{1, "503", "", false, "2"},
		{2, OutcomeTimeout, "", false, ""},
	}
	for _, tt := range tests {
		got := l.placeOrder(t.Context(), start, tt.i, 0)
		if got.Probe != ProbeCheckout || got.Outcome != tt.wantOutcome || got.OrderID != tt.wantOrder {
			t.Errorf("request %d: %s %q order %q, want checkout %q order %q", tt.i, got.Probe, got.Outcome, got.OrderID, tt.wantOutcome, tt.wantOrder)
		}
		if got.Stale != tt.wantStale || got.RetryAfter != tt.wantRetryAfter {
			t.Errorf("request %d: stale %v, Retry-After %q; want %v, %q", tt.i, got.Stale, got.RetryAfter, tt.wantStale, tt.wantRetryAfter)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := len(keys), 3; got != want {
		t.Errorf("%d distinct idempotency keys, want %d", got, want)
	}
}

func TestProbeHealthConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there any more
	cfg := DefaultConfig()
	cfg.CheckoutURL = srv.URL
	l := newLoad(cfg, "run1")
	if got := l.probeHealth(t.Context(), l.health, time.Now(), 0, 0); got.Outcome != OutcomeError {
		t.Errorf("outcome = %q, want %q", got.Outcome, OutcomeError)
	}
	if err := l.ready(t.Context()); err == nil {
		t.Error("ready() = nil for a checkout that does not answer, want an error")
	}
}

func TestAcknowledged(t *testing.T) {
	t.Parallel()
	samples := []Sample{
		{Probe: ProbeCheckout, Outcome: "201", OrderID: "a"},
		{Probe: ProbeCheckout, Outcome: "402", OrderID: "b"},
		{Probe: ProbeCheckout, Outcome: "504"},
		{Probe: ProbeHealth, Outcome: "200"},
	}
	got := acknowledged(samples)
	if len(got) != 2 || !got["a"] || got["b"] {
		t.Errorf("acknowledged() = %v, want a accepted and b declined", got)
	}
}

func TestIsStale(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"stale; age=95": true, "stale": true, " stale ;age=0": true,
		"": false, "fresh": false, "stalest; age=1": false, "age=3; stale": false,
	} {
		if got := isStale(v); got != want {
			t.Errorf("isStale(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestPlaceOrderBuysCatalogItems: with the catalog's price list, orders buy its SKUs in turn,
// each at the catalog's price and in the SKU's currency, so that every order passes the price
// check.
func TestPlaceOrderBuysCatalogItems(t *testing.T) {
	t.Parallel()
	items, err := catalogItems(map[string]catalogPrice{
		"SKU-9": {UnitPrice: 100, Currency: "EUR"},
		"SKU-1": {UnitPrice: 1299, Currency: "USD"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []orderBody
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body orderBody
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		got = append(got, body)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	cfg := DefaultConfig()
	cfg.CheckoutURL = srv.URL
	l := newLoad(cfg, "run1")
	l.items = items
	for i := range 3 {
		l.placeOrder(t.Context(), time.Now(), i, 0)
	}
	want := []struct {
		sku      string
		price    int64
		currency string
	}{{"SKU-1", 1299, "USD"}, {"SKU-9", 100, "EUR"}, {"SKU-1", 1299, "USD"}}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("%d orders, want %d", len(got), len(want))
	}
	for i, w := range want {
		o := got[i]
		if len(o.Items) != 1 || o.Items[0].SKU != w.sku || o.Items[0].UnitPrice != w.price || o.Items[0].Quantity != 1 || o.Currency != w.currency {
			t.Errorf("order %d = %+v, want one %s at %d %s", i, o, w.sku, w.price, w.currency)
		}
	}
	if _, err := catalogItems(map[string]catalogPrice{}); err == nil {
		t.Error("catalogItems(empty) = nil error, want one: every order would be rejected")
	}
}
