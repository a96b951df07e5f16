package paymentsim

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

const validBody = `{"amount":2598,"currency":"USD","payment_method":"pm_card_visa","reference":"ord-1"}`

// setup returns a simulator whose latency has no jitter, so synctest tests know exactly when
// a charge finishes.
func setup(t *testing.T, latency time.Duration) *Simulator {
	t.Helper()
	return New(Config{Latency: latency, Jitter: time.Second, Random: func() float64 { return 0.5 }})
}

// do sends one request to the simulator's handler and returns the recorded response.
func do(t *testing.T, ctx context.Context, h http.Handler, method, path string, header http.Header, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func postCharge(t *testing.T, h http.Handler, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	return do(t, t.Context(), h, http.MethodPost, "/v1/charges", http.Header{"Idempotency-Key": {key}}, body)
}

func TestChargeStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		key        string
		body       string
		wantStatus int
		wantType   string
	}{
		{"success", "k1", validBody, http.StatusCreated, ""},
		{"declined", "k1", `{"amount":1,"currency":"EUR","payment_method":"pm_card_chargeDeclined","reference":"r"}`, http.StatusPaymentRequired, "card_declined"},
		{"missing key", "", validBody, http.StatusBadRequest, "invalid_request_error"},
		{"key with space", "a b", validBody, http.StatusBadRequest, "invalid_request_error"},
		{"not JSON", "k1", `amount=1`, http.StatusBadRequest, "invalid_request_error"},
		{"unknown field", "k1", `{"amount":1,"currency":"USD","payment_method":"pm","reference":"r","x":1}`, http.StatusBadRequest, "invalid_request_error"},
		{"trailing data", "k1", validBody + `{}`, http.StatusBadRequest, "invalid_request_error"},
		{"zero amount", "k1", `{"amount":0,"currency":"USD","payment_method":"pm","reference":"r"}`, http.StatusBadRequest, "invalid_request_error"},
		{"fractional amount", "k1", `{"amount":1.5,"currency":"USD","payment_method":"pm","reference":"r"}`, http.StatusBadRequest, "invalid_request_error"},
		{"lowercase currency", "k1", `{"amount":1,"currency":"usd","payment_method":"pm","reference":"r"}`, http.StatusBadRequest, "invalid_request_error"},
		{"missing reference", "k1", `{"amount":1,"currency":"USD","payment_method":"pm"}`, http.StatusBadRequest, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := postCharge(t, setup(t, 0), tt.key, tt.body)
			if got := w.Code; got != tt.wantStatus {
				t.Fatalf("status: got %d, want %d (body %s)", got, tt.wantStatus, w.Body)
			}
			var body struct {
				Error struct{ Type string }
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("decode body %q: %v", w.Body, err)
			}
			if got := body.Error.Type; got != tt.wantType {
				t.Errorf("error type: got %q, want %q", got, tt.wantType)
			}
		})
	}
}

func TestChargeReplay(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	first := postCharge(t, sim, "k1", validBody)
	again := postCharge(t, sim, "k1", validBody)

	if got, want := again.Code, first.Code; got != want {
		t.Errorf("replay status: got %d, want %d", got, want)
	}
	if got, want := again.Body.String(), first.Body.String(); got != want {
		t.Errorf("replay body: got %s, want %s", got, want)
	}
	if got := again.Header().Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("Idempotent-Replayed: got %q, want %q", got, "true")
	}
	if got := first.Header().Get("Idempotent-Replayed"); got != "" {
		t.Errorf("first response Idempotent-Replayed: got %q, want none", got)
	}
	other := strings.Replace(validBody, "2598", "2599", 1)
	if got, want := postCharge(t, sim, "k1", other).Code, http.StatusUnprocessableEntity; got != want {
		t.Errorf("key reused with another amount: got %d, want %d", got, want)
	}
	if got, want := sim.Stats().TotalCharges, 1; got != want {
		t.Errorf("total charges: got %d, want %d", got, want)
	}
}

func TestChargeConcurrentSameKey(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 200*time.Millisecond)
		go postCharge(t, sim, "k1", validBody)
		synctest.Wait() // the first request is now processing

		if got, want := postCharge(t, sim, "k1", validBody).Code, http.StatusConflict; got != want {
			t.Errorf("concurrent request: got %d, want %d", got, want)
		}
		<-sim.Idle()
		if got, want := sim.Stats().TotalCharges, 1; got != want {
			t.Errorf("total charges: got %d, want %d", got, want)
		}
	})
}

func TestChargeCompletesAfterClientLeaves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		header := http.Header{"Idempotency-Key": {"k1"}}
		go do(t, ctx, sim, http.MethodPost, "/v1/charges", header, validBody)

		time.Sleep(500 * time.Millisecond) // the client gave up 400 ms ago
		synctest.Wait()
		if got, want := sim.Stats().InFlight, 1; got != want {
			t.Errorf("in flight after the client left: got %d, want %d", got, want)
		}
		<-sim.Idle()
		st := sim.Stats()
		if got, want := st.TotalCharges, 1; got != want {
			t.Errorf("total charges: got %d, want %d", got, want)
		}
		if got, want := st.MaxInFlight, 1; got != want {
			t.Errorf("max in flight: got %d, want %d", got, want)
		}
	})
}

func TestDuplicateReferences(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	postCharge(t, sim, "k1", validBody)
	postCharge(t, sim, "k2", validBody) // a misbehaving client: new key, same order

	st := sim.Stats()
	if got, want := st.ChargesByReference["ord-1"], 2; got != want {
		t.Errorf("charges for ord-1: got %d, want %d", got, want)
	}
	if got, want := st.DuplicateReferences, 1; got != want {
		t.Errorf("duplicate references: got %d, want %d", got, want)
	}

	sim.Reset()
	if got, want := sim.Stats(), (Stats{ChargesByReference: map[string]int{}}); !equalStats(got, want) {
		t.Errorf("after reset: got %+v, want %+v", got, want)
	}
	if got, want := postCharge(t, sim, "k1", validBody).Header().Get("Idempotent-Replayed"), ""; got != want {
		t.Errorf("key after reset replayed: got %q, want %q", got, want)
	}
}

// A client that retries after the provider forgot its key charges the order a second time;
// the duplicate count must see it, so it counts from the charge record, not from the keys.
func TestDuplicateReferencesAfterForgottenKey(t *testing.T) {
	t.Parallel()
	sim := New(Config{LedgerCap: 3})
	for _, ref := range []string{"o1", "o2", "o3", "o4"} { // o4 evicts the key order-o1
		chargeFor(t, sim, "order-"+ref, ref)
	}
	again := postCharge(t, sim, "order-o1", strings.Replace(validBody, "ord-1", "o1", 1))
	if got := again.Header().Get("Idempotent-Replayed"); again.Code != http.StatusCreated || got != "" {
		t.Fatalf("re-charge under the forgotten key: got %d, replayed %q; want a new 201", again.Code, got)
	}

	w := do(t, t.Context(), sim, http.MethodGet, "/admin/stats", nil, "")
	var st Stats
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("decode /admin/stats %s: %v", w.Body, err)
	}
	if st.TotalCharges != 5 || st.DuplicateReferences != 1 || st.ChargesByReference["o1"] != 2 {
		t.Errorf("stats: %d charges, %d duplicate references, o1 charged %d times; want 5, 1, 2",
			st.TotalCharges, st.DuplicateReferences, st.ChargesByReference["o1"])
	}
	metrics := do(t, t.Context(), sim, http.MethodGet, "/metrics", nil, "").Body.String()
	if want := "paymentsim_duplicate_references 1\n"; !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %q", want)
	}
}

func equalStats(a, b Stats) bool {
	return a.TotalCharges == b.TotalCharges && a.Declines == b.Declines &&
		len(a.ChargesByReference) == len(b.ChargesByReference) &&
		a.DuplicateReferences == b.DuplicateReferences && a.IdempotencyKeys == b.IdempotencyKeys &&
		a.InFlight == b.InFlight && a.MaxInFlight == b.MaxInFlight && a.MaxInFlightDuringFault == b.MaxInFlightDuringFault
}

func TestLedgerCap(t *testing.T) {
	t.Parallel()
	sim := New(Config{LedgerCap: 2})
	for _, key := range []string{"k1", "k2", "k3"} {
		postCharge(t, sim, key, strings.Replace(validBody, "ord-1", key, 1))
	}
	st := sim.Stats()
	if got, want := st.IdempotencyKeys, 2; got != want {
		t.Errorf("keys kept: got %d, want %d", got, want)
	}
	if got, want := len(st.ChargesByReference), 3; got != want {
		t.Errorf("references kept: got %d (%v), want %d: charges outlive the keys", got, st.ChargesByReference, want)
	}
	if got, want := st.TotalCharges, 3; got != want {
		t.Errorf("total charges: got %d, want %d", got, want)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	w := do(t, t.Context(), setup(t, 0), http.MethodGet, "/health", nil, "")
	if got, want := w.Code, http.StatusOK; got != want {
		t.Errorf("status: got %d, want %d", got, want)
	}
	if got, want := strings.TrimSpace(w.Body.String()), `{"status":"ok"}`; got != want {
		t.Errorf("body: got %s, want %s", got, want)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	postCharge(t, sim, "k1", validBody)
	w := do(t, t.Context(), sim, http.MethodGet, "/metrics", nil, "")
	for _, want := range []string{
		`paymentsim_charge_requests_total{outcome="succeeded"} 1`,
		`paymentsim_charge_requests_in_flight 0`,
		`paymentsim_charge_requests_in_flight_max 1`,
		`paymentsim_charge_duration_seconds_count 1`,
	} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
