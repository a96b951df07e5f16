package paymentsim

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// lookup asks the simulator's handler for query's charges; status 0 means no answer.
func lookup(t *testing.T, ctx context.Context, h http.Handler, query string) (int, []charge) {
	t.Helper()
	w := do(t, ctx, h, http.MethodGet, "/v1/charges?"+query, nil, "")
	if w.Body.Len() == 0 {
		return 0, nil
	}
	if w.Code != http.StatusOK {
		return w.Code, nil
	}
	var body struct {
		Data *[]charge `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Data == nil {
		t.Fatalf("GET /v1/charges?%s: body %s: want {\"data\": [...]} (%v)", query, w.Body, err)
	}
	return w.Code, *body.Data
}

// chargeFor charges reference under key and returns the 201 body's charge.
func chargeFor(t *testing.T, h http.Handler, key, reference string) charge {
	t.Helper()
	w := postCharge(t, h, key, strings.Replace(validBody, "ord-1", reference, 1))
	if w.Code != http.StatusCreated {
		t.Fatalf("charge %s under %s: status %d (%s)", reference, key, w.Code, w.Body)
	}
	var ch charge
	if err := json.Unmarshal(w.Body.Bytes(), &ch); err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestLookup(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	if code, got := lookup(t, t.Context(), sim, "reference=ord-1"); code != http.StatusOK || len(got) != 0 {
		t.Fatalf("before any charge: got %d %v, want 200 and no charges", code, got)
	}

	first := chargeFor(t, sim, "k1", "ord-1")
	chargeFor(t, sim, "k1", "ord-1") // a replay is no new charge
	declined := strings.Replace(validBody, "pm_card_visa", declinedMethod, 1)
	postCharge(t, sim, "k2", declined) // a decline is no charge
	second := chargeFor(t, sim, "k3", "ord-1")
	chargeFor(t, sim, "k4", "ord-2")

	code, got := lookup(t, t.Context(), sim, "reference=ord-1")
	if want := []charge{first, second}; code != http.StatusOK || len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("lookup ord-1: got %d %+v, want 200 %+v (oldest first, as in the 201 bodies)", code, got, want)
	}

	sim.Reset()
	if _, got := lookup(t, t.Context(), sim, "reference=ord-1"); len(got) != 0 {
		t.Errorf("after reset: got %+v, want no charges", got)
	}
}

func TestLookupRejectsBadQueries(t *testing.T) {
	t.Parallel()
	for _, query := range []string{
		"reference=",
		"reference=a%20b",
		"reference=" + strings.Repeat("r", 256),
		"reference=ord-1&reference=ord-2",
		"reference=ord-1&limit=10",
		"ref=ord-1",
	} {
		t.Run(query, func(t *testing.T) {
			t.Parallel()
			if code, _ := lookup(t, t.Context(), setup(t, 0), query); code != http.StatusBadRequest {
				t.Errorf("GET /v1/charges?%s: got %d, want %d", query, code, http.StatusBadRequest)
			}
		})
	}
}

// The lookup answers from the charge record, which outlives the bounded key cache: a caller
// whose key was forgotten still learns that its order was charged.
func TestLookupOutlivesForgottenKeys(t *testing.T) {
	t.Parallel()
	sim := New(Config{LedgerCap: 2})
	want := chargeFor(t, sim, "order-o1", "o1")
	chargeFor(t, sim, "order-o2", "o2")
	chargeFor(t, sim, "order-o3", "o3") // evicts the key order-o1

	if got := sim.Stats().IdempotencyKeys; got != 2 {
		t.Fatalf("keys kept: got %d, want 2", got)
	}
	if _, got := lookup(t, t.Context(), sim, "reference=o1"); len(got) != 1 || got[0] != want {
		t.Errorf("lookup o1 after its key was forgotten: got %+v, want [%+v]", got, want)
	}
}

// The charge record is bounded too, by charges: the oldest charge goes first, whatever its
// reference, and never before its key (a cap below the key cache's is raised to it).
func TestChargeCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		ledgerCap, charge int
		wantKept          []string // references still found after charging a, b, a, c
	}{
		{"cap of three charges", 1, 3, []string{"a", "b", "c"}},
		{"cap of two charges", 1, 2, []string{"a", "c"}},
		{"cap below the key cache raised to it", 3, 1, []string{"a", "b", "c"}},
		{"default: ten times the key cache", 1, 0, []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim := New(Config{LedgerCap: tt.ledgerCap, ChargeCap: tt.charge})
			for i, ref := range []string{"a", "b", "a", "c"} {
				chargeFor(t, sim, "k"+string(rune('0'+i)), ref)
			}
			var kept []string
			for _, ref := range []string{"a", "b", "c"} {
				if _, got := lookup(t, t.Context(), sim, "reference="+ref); len(got) > 0 {
					kept = append(kept, ref)
				}
			}
			if strings.Join(kept, ",") != strings.Join(tt.wantKept, ",") {
				t.Errorf("references found: got %v, want %v", kept, tt.wantKept)
			}
		})
	}
}

// A provider outage takes its lookup down with its charges.
func TestLookupFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault      string
		wantStatus int
	}{
		{`{"down":true}`, http.StatusServiceUnavailable},
		{`{"error_rate":1}`, http.StatusInternalServerError},
		{`{"error_rate":0.4}`, http.StatusOK}, // setup's Random returns 0.5
		{`{"reset_after_charge":true}`, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			t.Parallel()
			sim := setup(t, 0)
			addFault(t, sim, tt.fault)
			if got, _ := lookup(t, t.Context(), sim, "reference=ord-1"); got != tt.wantStatus {
				t.Errorf("status: got %d, want %d", got, tt.wantStatus)
			}
		})
	}
}

func TestLookupLatencyAndHang(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 200*time.Millisecond)
		addFault(t, sim, `{"latency":"1s","duration":"2s"}`)
		began := time.Now()
		lookup(t, t.Context(), sim, "reference=ord-1")
		if got, want := time.Since(began), 1200*time.Millisecond; got != want {
			t.Errorf("lookup under a latency fault took %v, want %v", got, want)
		}

		time.Sleep(time.Second) // the latency fault is over
		addFault(t, sim, `{"hang":true,"duration":"5s"}`)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if code, _ := lookup(t, ctx, sim, "reference=ord-1"); code != 0 {
			t.Errorf("hung lookup whose client gave up: got %d, want no answer", code)
		}
		began = time.Now()
		if code, _ := lookup(t, t.Context(), sim, "reference=ord-1"); code != http.StatusOK {
			t.Errorf("patient lookup: got %d, want 200", code)
		}
		if got, want := time.Since(began), 4*time.Second; got < want {
			t.Errorf("hung for %v, want at least %v", got, want)
		}
	})
}
