package paymentsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

const intentForm = "amount=2598&currency=usd&payment_method=pm_card_visa&confirm=true&payment_method_types[0]=card&metadata[order_id]=ord-1"

var stripeHeader = http.Header{
	"Authorization": {"Bearer sk_test_sim"},
	"Content-Type":  {"application/x-www-form-urlencoded"},
}

func withHeader(h http.Header, kv ...string) http.Header {
	h = h.Clone()
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func createIntent(t *testing.T, h http.Handler, key, form string) *httptest.ResponseRecorder {
	t.Helper()
	return do(t, t.Context(), h, http.MethodPost, "/v1/payment_intents", withHeader(stripeHeader, "Idempotency-Key", key), form)
}

type intentBody struct {
	ID           string            `json:"id"`
	Object       string            `json:"object"`
	Status       string            `json:"status"`
	Amount       int64             `json:"amount"`
	Currency     string            `json:"currency"`
	Metadata     map[string]string `json:"metadata"`
	Created      int64             `json:"created"`
	LatestCharge *string           `json:"latest_charge"`
}

type errorBody struct {
	Error struct {
		Type, Code, Param string
		DeclineCode       string      `json:"decline_code"`
		PaymentIntent     *intentBody `json:"payment_intent"`
	}
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %q: %v", w.Body, err)
	}
	return v
}

// TestCreateIntentAnswers: each kind of create gets Stripe's status, error type and code.
func TestCreateIntentAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		header     http.Header
		form       string
		wantStatus int
		wantType   string
		wantCode   string
		wantParam  string
	}{
		{name: "succeeded", form: intentForm, wantStatus: http.StatusOK},
		{name: "declined", form: strings.Replace(intentForm, "pm_card_visa", "pm_card_chargeDeclined", 1),
			wantStatus: http.StatusPaymentRequired, wantType: "card_error", wantCode: "card_declined", wantParam: "payment_method"},
		{name: "authentication required", form: strings.Replace(intentForm, "pm_card_visa", "pm_card_authenticationRequired", 1), wantStatus: http.StatusOK},
		{name: "no key", header: withHeader(stripeHeader, "Authorization", ""), form: intentForm,
			wantStatus: http.StatusUnauthorized, wantType: "invalid_request_error"},
		{name: "a live key", header: withHeader(stripeHeader, "Authorization", "Bearer sk_live_x"), form: intentForm,
			wantStatus: http.StatusUnauthorized, wantType: "invalid_request_error"},
		{name: "misspelled parameter", form: strings.Replace(intentForm, "payment_method=", "payment_methd=", 1),
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_unknown", wantParam: "payment_methd"},
		{name: "JSON body", header: withHeader(stripeHeader, "Content-Type", "application/json"),
			form:       `{"amount":2598,"currency":"usd","payment_method":"pm_card_visa","confirm":true}`,
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_invalid"},
		{name: "uppercase currency", form: strings.Replace(intentForm, "usd", "USD", 1),
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_invalid", wantParam: "currency"},
		{name: "without confirm", form: strings.Replace(intentForm, "&confirm=true", "", 1), wantStatus: http.StatusOK},
		{name: "confirm neither true nor false", form: strings.Replace(intentForm, "confirm=true", "confirm=yes", 1),
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_invalid", wantParam: "confirm"},
		{name: "missing amount", form: strings.Replace(intentForm, "amount=2598&", "", 1),
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_missing", wantParam: "amount"},
		{name: "zero amount", form: strings.Replace(intentForm, "2598", "0", 1),
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_invalid", wantParam: "amount"},
		{name: "fractional amount", form: strings.Replace(intentForm, "2598", "25.98", 1),
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_invalid", wantParam: "amount"},
		{name: "repeated parameter", form: intentForm + "&amount=2598",
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_invalid", wantParam: "amount"},
		{name: "malformed form", form: intentForm + "&metadata[order_id]=%zz",
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_invalid"},
		{name: "order id with a space", form: strings.Replace(intentForm, "ord-1", "ord%201", 1),
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_invalid", wantParam: "metadata[order_id]"},
		{name: "key with a space", header: withHeader(stripeHeader, "Idempotency-Key", "a b"), form: intentForm,
			wantStatus: http.StatusBadRequest, wantType: "invalid_request_error", wantCode: "parameter_invalid"},
		// Stripe takes a create without a key as a request of its own.
		{name: "without a key", header: stripeHeader, form: intentForm, wantStatus: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			header := withHeader(stripeHeader, "Idempotency-Key", "order-1")
			if tt.header != nil {
				header = tt.header
			}
			w := do(t, t.Context(), setup(t, 0), http.MethodPost, "/v1/payment_intents", header, tt.form)
			if w.Code != tt.wantStatus {
				t.Fatalf("status: got %d, want %d (body %s)", w.Code, tt.wantStatus, w.Body)
			}
			if tt.wantStatus == http.StatusOK {
				return
			}
			e := decode[errorBody](t, w).Error
			if e.Type != tt.wantType || e.Code != tt.wantCode || e.Param != tt.wantParam {
				t.Errorf("error: got type %q code %q param %q, want %q %q %q", e.Type, e.Code, e.Param, tt.wantType, tt.wantCode, tt.wantParam)
			}
		})
	}
}

// TestCreateIntentStatuses: a card that succeeds makes a charge, a declined card leaves the
// intent requires_payment_method (and says so in the 402), a card asking for 3-D Secure
// leaves it requires_action; each intent carries its order id.
func TestCreateIntentStatuses(t *testing.T) {
	t.Parallel()
	for method, want := range map[string]string{
		"pm_card_visa": "succeeded", "pm_card_chargeDeclined": "requires_payment_method", "pm_card_authenticationRequired": "requires_action",
	} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			sim := setup(t, 0)
			w := createIntent(t, sim, "order-1", strings.Replace(intentForm, "pm_card_visa", method, 1))
			pi := decode[intentBody](t, w)
			if w.Code == http.StatusPaymentRequired {
				pi = *decode[errorBody](t, w).Error.PaymentIntent
			}
			if pi.Status != want || pi.Metadata["order_id"] != "ord-1" || pi.Object != "payment_intent" || !strings.HasPrefix(pi.ID, "pi_") {
				t.Errorf("intent %+v: want status %s, order ord-1", pi, want)
			}
			if charged := pi.LatestCharge != nil; charged != (want == "succeeded") {
				t.Errorf("latest_charge %v for status %s", pi.LatestCharge, pi.Status)
			}
			if got := sim.Stats().ChargesByReference["ord-1"]; got != map[bool]int{true: 1}[want == "succeeded"] {
				t.Errorf("charges of ord-1: %d", got)
			}
		})
	}
}

// TestCreateIntentIdempotency: a repeat of a finished key replays its answer byte for byte,
// a decline too; the key with other parameters is an idempotency_error; nothing is charged
// twice. (TestCreateIntentConcurrentSameKey: the key while its request is processing.)
func TestCreateIntentIdempotency(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	first := createIntent(t, sim, "order-1", intentForm)
	again := createIntent(t, sim, "order-1", intentForm)
	if again.Code != first.Code || again.Body.String() != first.Body.String() || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: got %d %s (replayed %q), want %d %s", again.Code, again.Body, again.Header().Get("Idempotent-Replayed"), first.Code, first.Body)
	}
	if got := first.Header().Get("Idempotent-Replayed"); got != "" {
		t.Errorf("first response Idempotent-Replayed: got %q, want none", got)
	}
	other := createIntent(t, sim, "order-1", strings.Replace(intentForm, "2598", "2599", 1))
	if e := decode[errorBody](t, other).Error; other.Code != http.StatusBadRequest || e.Type != "idempotency_error" {
		t.Errorf("key reused with another amount: %d %s", other.Code, other.Body)
	}
	declined := strings.Replace(intentForm, "pm_card_visa", "pm_card_chargeDeclined", 1)
	d1, d2 := createIntent(t, sim, "order-2", declined), createIntent(t, sim, "order-2", declined)
	if d2.Code != http.StatusPaymentRequired || d2.Body.String() != d1.Body.String() {
		t.Errorf("declined replay: %d %s, want the first %s", d2.Code, d2.Body, d1.Body)
	}
	if st := sim.Stats(); st.TotalCharges != 1 || st.Declines != 1 || st.DuplicateReferences != 0 {
		t.Errorf("stats %+v: want one charge, one decline", st)
	}
}

// TestKeyRetention: a key older than the retention is forgotten, as Stripe forgets keys
// after 24 hours, so its reuse is processed as a new request; a younger one is replayed.
func TestKeyRetention(t *testing.T) {
	t.Parallel()
	l := newLedger(10, time.Hour, 10)
	e, c, _, _ := l.claim("k", intentRequest{Amount: 1})
	if c != claimNew {
		t.Fatalf("first claim: %v", c)
	}
	l.finish(e, response{status: 200}, intent{ID: "pi_1", Status: "succeeded"})
	if _, c, _, _ := l.claim("k", intentRequest{Amount: 1}); c != claimDone {
		t.Fatalf("claim within the retention: got %v, want done", c)
	}
	e.at = e.at.Add(-time.Hour)
	if _, c, _, _ := l.claim("k", intentRequest{Amount: 1}); c != claimNew {
		t.Errorf("claim after the retention: got %v, want new", c)
	}
}

// TestListIntents: the list is newest first by creation; starting_after pages to older
// intents, ending_before to newer ones; created[gte]/[lte] bound the window in Unix seconds;
// an intent recorded late (its request hung) takes its place by its creation time.
func TestListIntents(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	base := time.Unix(1_800_000_000, 0)
	for i, sec := range []int64{0, 1, 2, 3, 4} {
		sim.ledger.intents.add(intent{ID: fmt.Sprint("pi_", i), Status: "succeeded", Created: base.Add(time.Duration(sec) * time.Second)})
	}
	sim.ledger.intents.add(intent{ID: "pi_late", Status: "succeeded", Created: base.Add(1500 * time.Millisecond)})

	list := func(query string) ([]string, bool) {
		t.Helper()
		w := do(t, t.Context(), sim, http.MethodGet, "/v1/payment_intents?"+query, stripeHeader, "")
		if w.Code != http.StatusOK {
			t.Fatalf("list %s: %d %s", query, w.Code, w.Body)
		}
		body := decode[struct {
			Object  string
			HasMore bool `json:"has_more"`
			Data    []intentBody
		}](t, w)
		ids := make([]string, len(body.Data))
		for i, pi := range body.Data {
			ids[i] = pi.ID
		}
		return ids, body.HasMore
	}
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	tests := []struct {
		query    string
		want     string
		wantMore bool
	}{
		{q("limit", "3"), "pi_4 pi_3 pi_2", true},
		{q("limit", "3", "starting_after", "pi_2"), "pi_late pi_1 pi_0", false},
		{q("limit", "2", "ending_before", "pi_1"), "pi_2 pi_late", true},
		{q("limit", "10", "ending_before", "pi_2"), "pi_4 pi_3", false},
		{q("created[gte]", fmt.Sprint(base.Unix()+1), "created[lte]", fmt.Sprint(base.Unix()+2)), "pi_2 pi_late pi_1", false},
		{q("created[gte]", fmt.Sprint(base.Unix()+1), "limit", "1", "starting_after", "pi_late"), "pi_1", false},
	}
	for _, tt := range tests {
		ids, more := list(tt.query)
		if got := strings.Join(ids, " "); got != tt.want || more != tt.wantMore {
			t.Errorf("list %s: got %s (has_more %v), want %s (%v)", tt.query, got, more, tt.want, tt.wantMore)
		}
	}
	for _, bad := range []string{q("created_gte", "1"), q("limit", "101"), q("starting_after", "pi_none"), q("starting_after", "pi_1", "ending_before", "pi_2")} {
		if w := do(t, t.Context(), sim, http.MethodGet, "/v1/payment_intents?"+bad, stripeHeader, ""); w.Code != http.StatusBadRequest {
			t.Errorf("list %s: got %d, want 400", bad, w.Code)
		}
	}
}

// TestRetrieveIntent: an intent by id as it is now; 404 resource_missing for none.
func TestRetrieveIntent(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	created := decode[intentBody](t, createIntent(t, sim, "order-1", intentForm))
	w := do(t, t.Context(), sim, http.MethodGet, "/v1/payment_intents/"+created.ID, stripeHeader, "")
	if got := decode[intentBody](t, w); w.Code != http.StatusOK || got.ID != created.ID || got.Status != "succeeded" {
		t.Errorf("retrieve: %d %s", w.Code, w.Body)
	}
	w = do(t, t.Context(), sim, http.MethodGet, "/v1/payment_intents/pi_none", stripeHeader, "")
	if e := decode[errorBody](t, w).Error; w.Code != http.StatusNotFound || e.Code != "resource_missing" {
		t.Errorf("retrieve of none: %d %s", w.Code, w.Body)
	}
}

// TestSearchLagsTheList: a PaymentIntent is in the list the moment it is recorded, but in
// search only SearchLag later, as Stripe's search lags writes. A lookup by search right after
// an ambiguous charge would say "none" for an order the provider charged; the list does not.
func TestSearchLagsTheList(t *testing.T) {
	t.Parallel()
	search := func(sim *Simulator) int {
		t.Helper()
		q := url.Values{"query": {"metadata['order_id']:'ord-1'"}}.Encode()
		w := do(t, t.Context(), sim, http.MethodGet, "/v1/payment_intents/search?"+q, stripeHeader, "")
		if w.Code != http.StatusOK {
			t.Fatalf("search: %d %s", w.Code, w.Body)
		}
		return len(decode[struct{ Data []intentBody }](t, w).Data)
	}
	lagging := New(Config{SearchLag: time.Hour})
	createIntent(t, lagging, "order-1", intentForm)
	listed := decode[struct{ Data []intentBody }](t, do(t, t.Context(), lagging, http.MethodGet, "/v1/payment_intents", stripeHeader, ""))
	if len(listed.Data) != 1 {
		t.Fatalf("list right after the create: %d PaymentIntents, want 1", len(listed.Data))
	}
	if got := search(lagging); got != 0 {
		t.Errorf("search right after the create, an hour's lag: %d PaymentIntents, want 0", got)
	}
	current := New(Config{SearchLag: -1})
	createIntent(t, current, "order-1", intentForm)
	if got := search(current); got != 1 {
		t.Errorf("search without lag: %d PaymentIntents, want 1", got)
	}
	w := do(t, t.Context(), current, http.MethodGet, "/v1/payment_intents/search?query=status:'succeeded'", stripeHeader, "")
	if w.Code != http.StatusBadRequest {
		t.Errorf("search by status: %d, want 400 (the simulator searches by order id only)", w.Code)
	}
}
