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

// chargeFor creates a PaymentIntent for orderID under key and returns the 200 body's intent.
func chargeFor(t *testing.T, h http.Handler, key, orderID string) intentBody {
	t.Helper()
	w := createIntent(t, h, key, orderForm(orderID))
	if w.Code != http.StatusOK {
		t.Fatalf("charge %s under %s: status %d (%s)", orderID, key, w.Code, w.Body)
	}
	return decode[intentBody](t, w)
}

// orderForm is intentForm for another order.
func orderForm(orderID string) string {
	return strings.Replace(intentForm, "metadata[order_id]=ord-1", "metadata[order_id]="+orderID, 1)
}

// Two creates with one key at once: the second is refused while the first is processing,
// and only one charge is made.
func TestCreateIntentConcurrentSameKey(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 200*time.Millisecond)
		go createIntent(t, sim, "k1", intentForm)
		synctest.Wait() // the first request is now processing

		busy := createIntent(t, sim, "k1", intentForm)
		if e := decode[errorBody](t, busy).Error; busy.Code != http.StatusConflict || e.Code != "idempotency_key_in_use" {
			t.Errorf("concurrent request: got %d %s, want %d idempotency_key_in_use", busy.Code, busy.Body, http.StatusConflict)
		}
		<-sim.Idle()
		if got, want := sim.Stats().TotalCharges, 1; got != want {
			t.Errorf("total charges: got %d, want %d", got, want)
		}
	})
}

func TestCreateIntentCompletesAfterClientLeaves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		go do(t, ctx, sim, http.MethodPost, "/v1/payment_intents", withHeader(stripeHeader, "Idempotency-Key", "k1"), intentForm)

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
	chargeFor(t, sim, "k1", "ord-1")
	chargeFor(t, sim, "k2", "ord-1") // a misbehaving client: new key, same order
	chargeFor(t, sim, "k3", "ord-2")
	createIntent(t, sim, "k4", strings.Replace(intentForm, "pm_card_visa", declinedMethod, 1)) // a decline is no charge

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
	if got, want := createIntent(t, sim, "k1", intentForm).Header().Get("Idempotent-Replayed"), ""; got != want {
		t.Errorf("key after reset replayed: got %q, want %q", got, want)
	}
}

// A client that retries after the provider forgot its key charges the order a second time;
// the duplicate count must see it, so it counts from the PaymentIntents, not from the keys.
func TestDuplicateReferencesAfterForgottenKey(t *testing.T) {
	t.Parallel()
	sim := New(Config{LedgerCap: 3})
	for _, ref := range []string{"o1", "o2", "o3", "o4"} { // o4 evicts the key order-o1
		chargeFor(t, sim, "order-"+ref, ref)
	}
	again := createIntent(t, sim, "order-o1", orderForm("o1"))
	if got := again.Header().Get("Idempotent-Replayed"); again.Code != http.StatusOK || got != "" {
		t.Fatalf("re-charge under the forgotten key: got %d, replayed %q; want a new 200", again.Code, got)
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
		chargeFor(t, sim, key, key)
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
	chargeFor(t, sim, "k1", "ord-1")
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
