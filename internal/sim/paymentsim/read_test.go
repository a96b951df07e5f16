package paymentsim

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// list asks the simulator's handler for a page of the PaymentIntents list; status 0 means no
// answer.
func list(t *testing.T, ctx context.Context, h http.Handler, query string) (status int, page []intentBody, hasMore bool) {
	t.Helper()
	w := do(t, ctx, h, http.MethodGet, "/v1/payment_intents?"+query, stripeHeader, "")
	if w.Body.Len() == 0 {
		return 0, nil, false
	}
	if w.Code != http.StatusOK {
		return w.Code, nil, false
	}
	body := decode[struct {
		Object  string
		HasMore bool `json:"has_more"`
		Data    *[]intentBody
	}](t, w)
	if body.Object != "list" || body.Data == nil {
		t.Fatalf("GET /v1/payment_intents?%s: body %s: want a list with \"data\": [...]", query, w.Body)
	}
	return w.Code, *body.Data, body.HasMore
}

// ids returns the intents' ids, in order.
func ids(page []intentBody) []string {
	out := make([]string, len(page))
	for i, pi := range page {
		out[i] = pi.ID
	}
	return out
}

// TestListHoldsEveryIntent: every create makes one PaymentIntent, whatever its outcome, and
// a replay makes none; a reset forgets them all.
func TestListHoldsEveryIntent(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	if code, got, _ := list(t, t.Context(), sim, ""); code != http.StatusOK || len(got) != 0 {
		t.Fatalf("before any create: got %d %v, want 200 and no PaymentIntents", code, got)
	}

	first := chargeFor(t, sim, "k1", "ord-1")
	chargeFor(t, sim, "k1", "ord-1") // a replay is no new intent
	declined := decode[errorBody](t, createIntent(t, sim, "k2", strings.Replace(intentForm, "pm_card_visa", declinedMethod, 1))).Error.PaymentIntent
	second := chargeFor(t, sim, "k3", "ord-1")
	other := chargeFor(t, sim, "k4", "ord-2")

	code, got, _ := list(t, t.Context(), sim, "")
	want := []intentBody{other, second, *declined, first}
	if code != http.StatusOK || !slices.EqualFunc(got, want, sameIntent) {
		t.Errorf("list: got %d %+v, want 200 %+v (newest first, as in the create answers)", code, got, want)
	}

	sim.Reset()
	if _, got, _ := list(t, t.Context(), sim, ""); len(got) != 0 {
		t.Errorf("after reset: got %+v, want no PaymentIntents", got)
	}
}

func sameIntent(a, b intentBody) bool {
	return a.ID == b.ID && a.Status == b.Status && a.Amount == b.Amount && a.Currency == b.Currency &&
		a.Created == b.Created && a.Metadata["order_id"] == b.Metadata["order_id"] && (a.LatestCharge == nil) == (b.LatestCharge == nil)
}

// TestListWalk: walked page by page from each page's last intent, the list yields every
// intent once, newest first; one created while the walk is under way is newer than where
// the walk began, and ending_before the walk's first intent finds it. created[gte] and
// created[lte] bound a window of creation times, in Unix seconds, both ends inclusive.
func TestListWalk(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 0)
		var (
			want    []string // newest first
			created []int64
		)
		for i := range 5 {
			pi := chargeFor(t, sim, fmt.Sprint("key-", i), fmt.Sprint("ord-", i))
			want = slices.Insert(want, 0, pi.ID)
			created = append(created, pi.Created)
			time.Sleep(time.Second)
		}

		var got []string
		late := ""
		for after := ""; ; {
			q := url.Values{"limit": {"2"}}
			if after != "" {
				q.Set("starting_after", after)
			}
			code, page, more := list(t, t.Context(), sim, q.Encode())
			if code != http.StatusOK {
				t.Fatalf("page after %q: status %d", after, code)
			}
			for _, pi := range page {
				got = append(got, pi.ID)
				after = pi.ID
			}
			if late == "" { // made while the walk is under way
				late = chargeFor(t, sim, "key-late", "ord-late").ID
			}
			if !more {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("walked %v, want every intent once, newest first: %v", got, want)
		}
		if _, page, _ := list(t, t.Context(), sim, url.Values{"ending_before": {want[0]}}.Encode()); !slices.Equal(ids(page), []string{late}) {
			t.Errorf("ending_before the walk's first: got %v, want the intent made during the walk, %s", ids(page), late)
		}

		window := url.Values{"created[gte]": {fmt.Sprint(created[1])}, "created[lte]": {fmt.Sprint(created[3])}}
		if _, page, _ := list(t, t.Context(), sim, window.Encode()); !slices.Equal(ids(page), want[1:4]) {
			t.Errorf("intents created from the second to the fourth: got %v, want %v", ids(page), want[1:4])
		}
	})
}

// The list answers from the PaymentIntents kept, which outlive the bounded key cache: a
// caller whose key was forgotten still learns that its order was charged.
func TestIntentsOutliveForgottenKeys(t *testing.T) {
	t.Parallel()
	sim := New(Config{LedgerCap: 2})
	want := chargeFor(t, sim, "order-o1", "o1")
	chargeFor(t, sim, "order-o2", "o2")
	chargeFor(t, sim, "order-o3", "o3") // evicts the key order-o1

	if got := sim.Stats().IdempotencyKeys; got != 2 {
		t.Fatalf("keys kept: got %d, want 2", got)
	}
	w := do(t, t.Context(), sim, http.MethodGet, "/v1/payment_intents/"+want.ID, stripeHeader, "")
	if got := decode[intentBody](t, w); w.Code != http.StatusOK || !sameIntent(got, want) {
		t.Errorf("retrieve o1's intent after its key was forgotten: got %d %+v, want %+v", w.Code, got, want)
	}
	if _, page, _ := list(t, t.Context(), sim, ""); len(page) != 3 || !sameIntent(page[2], want) {
		t.Errorf("list after o1's key was forgotten: got %+v, want o1's intent last of three", page)
	}
}

// The PaymentIntents kept are bounded too, by intents: the oldest goes first, whatever its
// order, and never before its key (a cap below the key cache's is raised to it).
func TestChargeCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		ledgerCap, charge int
		wantKept          []string // orders still listed after charging a, b, a, c
	}{
		{"cap of three intents", 1, 3, []string{"a", "b", "c"}},
		{"cap of two intents", 1, 2, []string{"a", "c"}},
		{"cap below the key cache raised to it", 3, 1, []string{"a", "b", "c"}},
		{"default: ten times the key cache", 1, 0, []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim := New(Config{LedgerCap: tt.ledgerCap, ChargeCap: tt.charge})
			for i, ref := range []string{"a", "b", "a", "c"} {
				chargeFor(t, sim, fmt.Sprint("k", i), ref)
			}
			_, page, _ := list(t, t.Context(), sim, "limit=100")
			var kept []string
			for _, pi := range page {
				kept = append(kept, pi.Metadata["order_id"])
			}
			// The duplicate count counts from the same intents the list shows.
			if got, want := sim.Stats().ChargesByReference["a"], strings.Count(strings.Join(kept, ""), "a"); got != want {
				t.Errorf("charges of a counted: got %d, want the %d listed", got, want)
			}
			slices.Sort(kept)
			if kept = slices.Compact(kept); !slices.Equal(kept, tt.wantKept) {
				t.Errorf("orders listed: got %v, want %v", kept, tt.wantKept)
			}
		})
	}
}

// A provider outage takes its reads down with its creates: retrieve, list and search alike.
func TestReadFaults(t *testing.T) {
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
			id := chargeFor(t, sim, "k1", "ord-1").ID
			addFault(t, sim, tt.fault)
			search := url.Values{"query": {"metadata['order_id']:'ord-1'"}}.Encode()
			for _, path := range []string{"/v1/payment_intents", "/v1/payment_intents/" + id, "/v1/payment_intents/search?" + search} {
				if got := do(t, t.Context(), sim, http.MethodGet, path, stripeHeader, "").Code; got != tt.wantStatus {
					t.Errorf("GET %s: got %d, want %d", path, got, tt.wantStatus)
				}
			}
		})
	}
}

func TestReadLatencyAndHang(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := setup(t, 200*time.Millisecond)
		addFault(t, sim, `{"latency":"1s","duration":"2s"}`)
		began := time.Now()
		list(t, t.Context(), sim, "")
		if got, want := time.Since(began), 1200*time.Millisecond; got != want {
			t.Errorf("list under a latency fault took %v, want %v", got, want)
		}

		time.Sleep(time.Second) // the latency fault is over
		addFault(t, sim, `{"hang":true,"duration":"5s"}`)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if code, _, _ := list(t, ctx, sim, ""); code != 0 {
			t.Errorf("hung list whose client gave up: got %d, want no answer", code)
		}
		began = time.Now()
		if code, _, _ := list(t, t.Context(), sim, ""); code != http.StatusOK {
			t.Errorf("patient list: got %d, want 200", code)
		}
		if got, want := time.Since(began), 4*time.Second; got < want {
			t.Errorf("hung for %v, want at least %v", got, want)
		}
	})
}
