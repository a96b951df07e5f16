package paymentsim

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
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
		{`{"error_rate":0.4}`, http.StatusCreated}, // setup's Random returns 0.5
		{`{"latency":"1s"}`, http.StatusCreated},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			t.Parallel()
			sim := setup(t, 0)
			addFault(t, sim, tt.fault)
			if got := postCharge(t, sim, "k1", validBody).Code; got != tt.wantStatus {
				t.Errorf("status: got %d, want %d", got, tt.wantStatus)
			}
		})
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
			postCharge(t, sim, "k"+string(rune('a'+i)), validBody)
			if got := time.Since(began); got != tt.want {
				t.Errorf("charge at t+%v took %v, want %v", tt.at, got, tt.want)
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

		charge := func(key string) { go postCharge(t, sim, key, validBody) }
		ask := func() { go do(t, t.Context(), sim, http.MethodGet, "/v1/charges?reference=ord-1", nil, "") }
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
	if got, want := postCharge(t, sim, "k1", validBody).Code, http.StatusCreated; got != want {
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
		header := http.Header{"Idempotency-Key": {"k1"}}
		do(t, ctx, sim, http.MethodPost, "/v1/charges", header, validBody)
		if got := sim.Stats().IdempotencyKeys; got != 0 {
			t.Errorf("keys after an abandoned hung request: got %d, want 0", got)
		}

		// A patient client is answered once the hang ends.
		began := time.Now()
		w := postCharge(t, sim, "k2", validBody)
		if got, want := w.Code, http.StatusCreated; got != want {
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
