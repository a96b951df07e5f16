package paymentsim

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// addFault posts body to the admin API and fails the test unless it is accepted.
func addFault(t *testing.T, h http.Handler, body string) {
	t.Helper()
	w := do(t, t.Context(), h, http.MethodPost, "/admin/faults", nil, body)
	if got, want := w.Code, http.StatusCreated; got != want {
		t.Fatalf("POST /admin/faults %s: got %d, want %d (%s)", body, got, want, w.Body)
	}
}

func TestFaultStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault      string
		wantStatus int
	}{
		{`{"down":true}`, http.StatusServiceUnavailable},
		{`{"error_rate":1}`, http.StatusInternalServerError},
		{`{"error_rate":0.4}`, http.StatusOK}, // setup's Random returns 0.5
		{`{"latency":"1s"}`, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			t.Parallel()
			sim := setup(t, 0)
			addFault(t, sim, tt.fault)
			if got := createIntent(t, sim, "k1", intentForm).Code; got != tt.wantStatus {
				t.Errorf("status: got %d, want %d", got, tt.wantStatus)
			}
		})
	}
}

// An error burst of 503s answers as an outage does, with the protocol's error body.
func TestFaultErrorStatus(t *testing.T) {
	t.Parallel()
	down := setup(t, 0)
	addFault(t, down, `{"down":true}`)
	want := createIntent(t, down, "k1", intentForm)

	sim := setup(t, 0)
	addFault(t, sim, `{"error_rate":1,"error_status":503}`)
	got := createIntent(t, sim, "k1", intentForm)
	if got.Code != http.StatusServiceUnavailable || got.Body.String() != want.Body.String() {
		t.Errorf("answer: got %d %s, want %d %s", got.Code, got.Body, want.Code, want.Body)
	}
	if got := sim.Stats().IdempotencyKeys; got != 0 {
		t.Errorf("keys after an injected error: got %d, want 0", got)
	}
}

func TestFaultMerge(t *testing.T) {
	t.Parallel()
	ms := func(n int) simulator.Duration { return simulator.Duration(time.Duration(n) * time.Millisecond) }
	trouble := func(rate float64) simulator.Trouble { return simulator.Trouble{ErrorRate: rate} }
	tests := []struct {
		name string
		f, g Fault
		want Fault
	}{
		{"the higher error rate brings its status",
			Fault{Trouble: trouble(0.5), ErrorStatus: 503}, Fault{Trouble: trouble(0.9)},
			Fault{Trouble: trouble(0.9)}},
		{"503 of two equal error rates",
			Fault{Trouble: trouble(0.5)}, Fault{Trouble: trouble(0.5), ErrorStatus: 503},
			Fault{Trouble: trouble(0.5), ErrorStatus: 503}},
		{"latency factors multiply",
			Fault{LatencyFactor: 2}, Fault{LatencyFactor: 5},
			Fault{LatencyFactor: 10}},
		{"a factor alone stays",
			Fault{LatencyFactor: 5}, Fault{Hang: true},
			Fault{LatencyFactor: 5, Hang: true}},
		{"the slower distribution wins whole",
			Fault{LatencyMedian: ms(120), LatencySigma: 0.8, LatencyCap: ms(380)}, Fault{LatencyMedian: ms(600), LatencySigma: 0.5},
			Fault{LatencyMedian: ms(600), LatencySigma: 0.5}},
		{"of equal medians, the larger σ",
			Fault{LatencyMedian: ms(120), LatencySigma: 0.8}, Fault{LatencyMedian: ms(120), LatencySigma: 0.5, LatencyCap: ms(380)},
			Fault{LatencyMedian: ms(120), LatencySigma: 0.8}},
		{"the smaller rate limit and capacity",
			Fault{RateLimit: 10, Capacity: 2}, Fault{RateLimit: 5, Capacity: 4},
			Fault{RateLimit: 5, Capacity: 2}},
		{"a rate limit alone stays",
			Fault{}, Fault{RateLimit: 10},
			Fault{RateLimit: 10}},
	}
	for _, tt := range tests {
		for _, merged := range []Fault{tt.f.Merge(tt.g), tt.g.Merge(tt.f)} {
			if merged != tt.want {
				t.Errorf("%s: got %+v, want %+v", tt.name, merged, tt.want)
			}
		}
	}
}

func TestFaultScheduled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 200*time.Millisecond)
		// The experiment's outage: slow by 10 s from t+0.5 s for 3 s.
		addFault(t, sim, `{"latency":"10s","start_in":"500ms","duration":"3s"}`)

		tests := []struct {
			at   time.Duration // since the fault was scheduled
			want time.Duration // how long a charge sent then takes
		}{
			{0, 200 * time.Millisecond},
			{time.Second, 10*time.Second + 200*time.Millisecond},
			{14 * time.Second, 200 * time.Millisecond},
		}
		start := time.Now()
		for i, tt := range tests {
			time.Sleep(tt.at - time.Since(start))
			began := time.Now()
			createIntent(t, sim, "k"+string(rune('a'+i)), intentForm)
			if got := time.Since(began); got != tt.want {
				t.Errorf("charge at t+%v took %v, want %v", tt.at, got, tt.want)
			}
		}
	})
}

// Flapping is five scheduled hang windows: 2 s hung, 2 s healthy, five times. A charge sent
// into a window waits for its end; one sent between windows is answered at once.
func TestFaultFlapping(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 0)
		for i := range 5 {
			addFault(t, sim, fmt.Sprintf(`{"hang":true,"start_in":"%ds","duration":"2s"}`, 4*i))
		}
		start := time.Now()
		for i, at := range []time.Duration{500 * time.Millisecond, 2500 * time.Millisecond, 16500 * time.Millisecond, 18500 * time.Millisecond} {
			time.Sleep(at - time.Since(start))
			createIntent(t, sim, "k"+strconv.Itoa(i), intentForm)
			// Hung charges are answered at the window's end, once the hang has been rechecked.
			want := at
			if at%(4*time.Second) < 2*time.Second {
				want = at.Truncate(4*time.Second) + 2*time.Second
			}
			if got := time.Since(start); got < want || got > want+hangRecheck {
				t.Errorf("charge sent at t+%v answered at t+%v, want t+%v", at, got, want)
			}
		}
	})
}

// The in-flight maximum during faults counts what piled up on the failing provider, not the
// traffic after it: requests that hang on past the fault stay in flight while new, fast ones
// arrive.
func TestMaxInFlightDuringFault(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 200*time.Millisecond)
		addFault(t, sim, `{"latency":"10s","start_in":"1s","duration":"1s"}`)

		charge := func(key string) { go createIntent(t, sim, key, intentForm) }
		ask := func() { go do(t, t.Context(), sim, http.MethodGet, "/v1/payment_intents", stripeHeader, "") }
		charge("before") // done by 200 ms
		ask()
		time.Sleep(1100 * time.Millisecond)
		charge("during-1") // both take 10.2 s
		charge("during-2")
		ask()
		time.Sleep(1500 * time.Millisecond) // the fault ended 600 ms ago
		charge("after-1")                   // fast again, but alongside the two hung ones
		charge("after-2")
		ask()
		synctest.Wait()

		st := sim.Stats()
		if st.MaxInFlight != 4 || st.MaxInFlightDuringFault != 2 {
			t.Errorf("max in flight = %d, during the fault = %d; want 4 and 2", st.MaxInFlight, st.MaxInFlightDuringFault)
		}
		if st.ChargesDuringFault != 2 || st.LookupsDuringFault != 1 {
			t.Errorf("charges, lookups during the fault = %d, %d; want 2, 1", st.ChargesDuringFault, st.LookupsDuringFault)
		}
		time.Sleep(10 * time.Second)
		<-sim.Idle()
		sim.Reset()
		if st := sim.Stats(); st.MaxInFlightDuringFault != 0 || st.ChargesDuringFault != 0 || st.LookupsDuringFault != 0 {
			t.Errorf("after reset: max in flight during the fault %d, charges %d, lookups %d; want 0",
				st.MaxInFlightDuringFault, st.ChargesDuringFault, st.LookupsDuringFault)
		}
	})
}

func TestFaultClear(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	addFault(t, sim, `{"down":true}`)
	if w := do(t, t.Context(), sim, http.MethodDelete, "/admin/faults", nil, ""); w.Code != http.StatusNoContent {
		t.Fatalf("DELETE /admin/faults: got %d, want %d", w.Code, http.StatusNoContent)
	}
	if got, want := createIntent(t, sim, "k1", intentForm).Code, http.StatusOK; got != want {
		t.Errorf("status after clearing: got %d, want %d", got, want)
	}
}

func TestFaultHang(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 0)
		addFault(t, sim, `{"hang":true,"duration":"5s"}`)

		// A client that gives up leaves nothing behind: the request never reached the ledger.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		do(t, ctx, sim, http.MethodPost, "/v1/payment_intents", withHeader(stripeHeader, "Idempotency-Key", "k1"), intentForm)
		if got := sim.Stats().IdempotencyKeys; got != 0 {
			t.Errorf("keys after an abandoned hung request: got %d, want 0", got)
		}

		// A patient client is answered once the hang ends.
		began := time.Now()
		w := createIntent(t, sim, "k2", intentForm)
		if got, want := w.Code, http.StatusOK; got != want {
			t.Errorf("status after the hang: got %d, want %d", got, want)
		}
		if got, want := time.Since(began), 4*time.Second; got < want {
			t.Errorf("hung for %v, want at least %v", got, want)
		}
	})
}

func TestAdminFaultValidation(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{}`,
		`{"latency":"-1s"}`,
		`{"latency":10}`,
		`{"error_rate":1.5}`,
		`{"capacity":-1}`,
		`{"error_status":503}`,
		`{"error_rate":1,"error_status":429}`,
		`{"latency_sigma":0.5}`,
		`{"latency_median":"100ms","latency_sigma":4}`,
		`{"latency_median":"100ms","latency_cap":"100ms"}`,
		`{"latency_factor":0.5}`,
		`{"rate_limit":-1}`,
		`{"down":true,"start_in":"-1s"}`,
		`{"down":true,"typo":1}`,
		`{"down":true}{}`,
	} {
		t.Run(body, func(t *testing.T) {
			t.Parallel()
			w := do(t, t.Context(), setup(t, 0), http.MethodPost, "/admin/faults", nil, body)
			if got, want := w.Code, http.StatusBadRequest; got != want {
				t.Errorf("status: got %d, want %d", got, want)
			}
		})
	}
}

func TestAdminToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header string
		want   int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", http.StatusUnauthorized},
		{"right token", "Bearer s3cret", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim := New(Config{AdminToken: "s3cret"})
			header := http.Header{"Authorization": {tt.header}}
			if got := do(t, t.Context(), sim, http.MethodGet, "/admin/stats", header, "").Code; got != tt.want {
				t.Errorf("status: got %d, want %d", got, tt.want)
			}
		})
	}
}
