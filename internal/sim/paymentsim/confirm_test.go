package paymentsim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// unconfirmedForm is intentForm without confirm: a create that moves no money.
var unconfirmedForm = strings.Replace(intentForm, "&confirm=true", "", 1)

func confirmIntent(t *testing.T, ctx context.Context, h http.Handler, key, id, form string) *httptest.ResponseRecorder {
	t.Helper()
	return do(t, ctx, h, http.MethodPost, "/v1/payment_intents/"+id+"/confirm", withHeader(stripeHeader, "Idempotency-Key", key), form)
}

// createUnconfirmed creates an unconfirmed PaymentIntent under key and returns it.
func createUnconfirmed(t *testing.T, h http.Handler, key, form string) intentBody {
	t.Helper()
	w := createIntent(t, h, key, form)
	if w.Code != http.StatusOK {
		t.Fatalf("create unconfirmed under %s: status %d (%s)", key, w.Code, w.Body)
	}
	return decode[intentBody](t, w)
}

// TestCreateUnconfirmedMovesNoMoney: a create without confirm (or with confirm=false) leaves
// the PaymentIntent requires_confirmation, charges nothing, and is listed at once.
func TestCreateUnconfirmedMovesNoMoney(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	pi := createUnconfirmed(t, sim, "order-1-create", unconfirmedForm)
	explicit := createUnconfirmed(t, sim, "order-2-create", strings.Replace(intentForm, "confirm=true", "confirm=false", 1))
	for _, got := range []intentBody{pi, explicit} {
		if got.Status != "requires_confirmation" || got.LatestCharge != nil || !strings.HasPrefix(got.ID, "pi_") {
			t.Errorf("unconfirmed intent %+v: want requires_confirmation without a charge", got)
		}
	}
	if st := sim.Stats(); st.TotalCharges != 0 || st.Declines != 0 || len(st.ChargesByReference) != 0 {
		t.Errorf("stats after unconfirmed creates: %+v, want no charge", st)
	}
	_, page, _ := list(t, t.Context(), sim, "")
	if got, want := ids(page), []string{explicit.ID, pi.ID}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("list: got %v, want %v", got, want)
	}
	if page[1].Status != "requires_confirmation" {
		t.Errorf("listed status %q, want requires_confirmation", page[1].Status)
	}
}

// TestConfirmChargesOnce: a confirm takes a charge's processing time and makes the intent's
// one charge; a replay of its key answers the same bytes and charges nothing more, the key
// reused for another intent is an idempotency_error, and a confirm under another key of
// the succeeded intent is refused with payment_intent_unexpected_state.
func TestConfirmChargesOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 200*time.Millisecond)
		pi := createUnconfirmed(t, sim, "order-1-create", unconfirmedForm)

		began := time.Now()
		first := confirmIntent(t, t.Context(), sim, "order-1-confirm", pi.ID, "")
		if got, want := time.Since(began), 200*time.Millisecond; got != want {
			t.Errorf("confirm took %v, want a charge's %v", got, want)
		}
		got := decode[intentBody](t, first)
		if first.Code != http.StatusOK || got.ID != pi.ID || got.Status != "succeeded" || got.LatestCharge == nil || got.Metadata["order_id"] != "ord-1" {
			t.Fatalf("confirm: %d %s, want %s succeeded with a charge", first.Code, first.Body, pi.ID)
		}

		again := confirmIntent(t, t.Context(), sim, "order-1-confirm", pi.ID, "")
		if again.Code != first.Code || again.Body.String() != first.Body.String() || again.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay: got %d %s (replayed %q), want %d %s", again.Code, again.Body, again.Header().Get("Idempotent-Replayed"), first.Code, first.Body)
		}
		other := createUnconfirmed(t, sim, "order-2-create", strings.Replace(unconfirmedForm, "ord-1", "ord-2", 1))
		if w := confirmIntent(t, t.Context(), sim, "order-1-confirm", other.ID, ""); w.Code != http.StatusBadRequest || decode[errorBody](t, w).Error.Type != "idempotency_error" {
			t.Errorf("the key reused for another intent: %d %s, want 400 idempotency_error", w.Code, w.Body)
		}
		w := confirmIntent(t, t.Context(), sim, "order-1-confirm-again", pi.ID, "")
		if e := decode[errorBody](t, w).Error; w.Code != http.StatusBadRequest || e.Code != "payment_intent_unexpected_state" ||
			e.PaymentIntent == nil || e.PaymentIntent.Status != "succeeded" {
			t.Errorf("confirm of a succeeded intent: %d %s, want 400 payment_intent_unexpected_state", w.Code, w.Body)
		}

		if st := sim.Stats(); st.TotalCharges != 1 || st.ChargesByReference["ord-1"] != 1 || st.DuplicateReferences != 0 {
			t.Errorf("stats %+v: want ord-1 charged once", st)
		}
		retrieved := decode[intentBody](t, do(t, t.Context(), sim, http.MethodGet, "/v1/payment_intents/"+pi.ID, stripeHeader, ""))
		if retrieved.Status != "succeeded" || *retrieved.LatestCharge != *got.LatestCharge {
			t.Errorf("retrieve after the confirm: %+v, want the confirm's charge", retrieved)
		}
	})
}

// TestConfirmRefusals: what Stripe refuses before confirming, answered as Stripe answers it;
// none of them records its key, so the same key may be used once the refusal is mended.
func TestConfirmRefusals(t *testing.T) {
	t.Parallel()
	declined := strings.Replace(unconfirmedForm, "pm_card_visa", declinedMethod, 1)
	tests := []struct {
		name       string
		create     string // the form of the intent's create; empty: confirm an unknown id
		confirm    string // the confirm's form
		wantStatus int
		wantCode   string
	}{
		{name: "unknown intent", wantStatus: http.StatusNotFound, wantCode: "resource_missing"},
		{name: "created confirmed", create: intentForm, wantStatus: http.StatusBadRequest, wantCode: "payment_intent_unexpected_state"},
		{name: "declined, no other payment method", create: declined, wantStatus: http.StatusBadRequest, wantCode: "payment_intent_unexpected_state"},
		{name: "unknown parameter", create: unconfirmedForm, confirm: "amount=1", wantStatus: http.StatusBadRequest, wantCode: "parameter_unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim := setup(t, 0)
			id := "pi_unknown"
			if tt.create != "" {
				w := createIntent(t, sim, "create", tt.create)
				id = decode[intentBody](t, w).ID
				if w.Code == http.StatusOK && tt.create == declined {
					confirmIntent(t, t.Context(), sim, "first-confirm", id, "") // declined: requires_payment_method
				}
			}
			w := confirmIntent(t, t.Context(), sim, "confirm", id, tt.confirm)
			if e := decode[errorBody](t, w).Error; w.Code != tt.wantStatus || e.Code != tt.wantCode {
				t.Errorf("got %d %s, want %d %s", w.Code, w.Body, tt.wantStatus, tt.wantCode)
			}
			if tt.create == declined {
				// Given another payment method, the declined intent is confirmed under the same key.
				w := confirmIntent(t, t.Context(), sim, "confirm", id, "payment_method=pm_card_visa")
				if got := decode[intentBody](t, w); w.Code != http.StatusOK || got.Status != "succeeded" {
					t.Errorf("confirm with another payment method: %d %s, want 200 succeeded", w.Code, w.Body)
				}
			}
		})
	}
}

// TestConfirmConcurrent: a second confirm of an intent, under another key, while the first
// is processing is refused as Stripe refuses a request for an object another holds.
func TestConfirmConcurrent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 200*time.Millisecond)
		pi := createUnconfirmed(t, sim, "create", unconfirmedForm)
		go confirmIntent(t, t.Context(), sim, "confirm-1", pi.ID, "")
		synctest.Wait() // the first confirm is processing
		w := confirmIntent(t, t.Context(), sim, "confirm-2", pi.ID, "")
		if e := decode[errorBody](t, w).Error; w.Code != http.StatusTooManyRequests || e.Code != "lock_timeout" {
			t.Errorf("concurrent confirm: %d %s, want 429 lock_timeout", w.Code, w.Body)
		}
		time.Sleep(time.Second)
		if st := sim.Stats(); st.TotalCharges != 1 {
			t.Errorf("charges: got %d, want 1", st.TotalCharges)
		}
	})
}

// TestConfirmHangs: a confirm under a hang is held as a create is; one whose client gave up
// charged nothing and left its key unrecorded, and a patient one is answered once the hang
// ends.
func TestConfirmHangs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 0)
		pi := createUnconfirmed(t, sim, "create", unconfirmedForm)
		addFault(t, sim, `{"hang":true,"duration":"5s"}`)

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if w := confirmIntent(t, ctx, sim, "confirm", pi.ID, ""); w.Body.Len() != 0 {
			t.Errorf("hung confirm whose client gave up: answered %d %s", w.Code, w.Body)
		}
		if st := sim.Stats(); st.TotalCharges != 0 || st.IdempotencyKeys != 1 {
			t.Errorf("after an abandoned hung confirm: %+v, want no charge and only the create's key", st)
		}

		began := time.Now()
		w := confirmIntent(t, t.Context(), sim, "confirm", pi.ID, "")
		if got := decode[intentBody](t, w); w.Code != http.StatusOK || got.Status != "succeeded" {
			t.Errorf("confirm after the hang: %d %s, want 200 succeeded", w.Code, w.Body)
		}
		if got, want := time.Since(began), 4*time.Second; got < want {
			t.Errorf("hung for %v, want at least %v", got, want)
		}
	})
}
