package paymentsim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Above the rate a charge is refused at once with 429 and Retry-After, charges nothing and
// leaves its key unclaimed; refusals take no tokens, so the same request, however often it
// was refused, succeeds once the client has waited.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := New(Config{RateLimit: 2})
		createIntent(t, sim, "k1", intentForm)
		createIntent(t, sim, "k2", orderForm("ord-2"))
		third := orderForm("ord-3")

		// The next token comes in half a second, whatever was refused before: Retry-After
		// rounds that up to one.
		var w *httptest.ResponseRecorder
		for i := range 5 {
			w = createIntent(t, sim, "k3", third)
			if got, want := w.Code, http.StatusTooManyRequests; got != want {
				t.Fatalf("third charge in a second, attempt %d: got %d, want %d", i+1, got, want)
			}
			if got, want := w.Header().Get("Retry-After"), "1"; got != want {
				t.Errorf("Retry-After of attempt %d: got %q, want %q", i+1, got, want)
			}
		}
		var body struct {
			Error struct{ Type, Code, Message string }
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Type != "invalid_request_error" ||
			body.Error.Code != "rate_limit" || body.Error.Message == "" {
			t.Errorf("body: got %s, want an invalid_request_error with code rate_limit and a message", w.Body)
		}
		st := sim.Stats()
		if st.TotalCharges != 2 || st.IdempotencyKeys != 2 || st.RateLimited != 5 {
			t.Errorf("stats: %d charges, %d keys, %d rate limited; want 2, 2, 5", st.TotalCharges, st.IdempotencyKeys, st.RateLimited)
		}
		metrics := do(t, t.Context(), sim, http.MethodGet, "/metrics", nil, "").Body.String()
		if want := `paymentsim_charge_requests_total{outcome="rate_limited"} 5`; !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
		if got, want := do(t, t.Context(), sim, http.MethodGet, "/v1/payment_intents", stripeHeader, "").Code, http.StatusOK; got != want {
			t.Errorf("list over the charge rate: got %d, want %d", got, want)
		}

		time.Sleep(time.Second)
		again := createIntent(t, sim, "k3", third)
		if again.Code != http.StatusOK || again.Header().Get("Idempotent-Replayed") != "" {
			t.Errorf("the same charge after Retry-After: got %d, replayed %q; want a new 200", again.Code, again.Header().Get("Idempotent-Replayed"))
		}
	})
}

// A rate_limit fault replaces the configured limit while it is active; overlapping ones take
// the smallest.
func TestRateLimitInForce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		configured int
		faults     []string
		want       int // charges of ten at one instant that pass
	}{
		{"off by default", 0, nil, 10},
		{"configured", 2, nil, 2},
		{"a fault on an unlimited provider", 0, []string{`{"rate_limit":3}`}, 3},
		{"a fault lowers the configured limit", 5, []string{`{"rate_limit":2}`}, 2},
		{"a fault raises the configured limit", 2, []string{`{"rate_limit":5}`}, 5},
		{"overlapping faults take the smallest", 0, []string{`{"rate_limit":3}`, `{"rate_limit":2}`}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				sim := New(Config{RateLimit: tt.configured})
				for _, f := range tt.faults {
					addFault(t, sim, f)
				}
				passed := 0
				for i := range 10 {
					if createIntent(t, sim, "k"+strconv.Itoa(i), intentForm).Code == http.StatusOK {
						passed++
					}
				}
				if passed != tt.want {
					t.Errorf("charges passed: got %d, want %d", passed, tt.want)
				}
			})
		})
	}
}
