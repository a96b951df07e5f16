package payment_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

func newClient(t *testing.T, url string) *payment.Client {
	t.Helper()
	client, err := payment.NewClient(payment.Config{BaseURL: url, SecretKey: "sk_test_checkout"})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(client.CloseIdleConnections)
	return client
}

// recent is the lookup of orderID over the minutes around now, where every charge of a
// test falls.
func recent(orderID string) payment.Lookup {
	return payment.Lookup{OrderID: orderID, CreatedFrom: time.Now().Add(-time.Minute), CreatedTo: time.Now().Add(time.Minute)}
}

func chargeIDs(receipts []payment.Receipt) []string {
	ids := make([]string, len(receipts))
	for i, r := range receipts {
		ids[i] = r.ChargeID
	}
	return ids
}

// The lookup finds what the provider charged, oldest first, also after the provider forgot
// the order's key — exactly when a caller can no longer ask by charging again.
func TestFindCharges(t *testing.T) {
	t.Parallel()
	sim := simtest.StartConfig(t, paymentsim.Config{LedgerCap: 1})
	client := newClient(t, sim.URL)

	none, err := client.FindCharges(t.Context(), recent("o1"))
	if err != nil || len(none) != 0 {
		t.Fatalf("before any charge: got %v, %v; want no charges and no error", none, err)
	}

	first, err := client.Charge(t.Context(), order("o1"))
	if err != nil {
		t.Fatalf("Charge o1: %v", err)
	}
	found, err := client.FindCharges(t.Context(), recent("o1"))
	if err != nil || len(found) != 1 || found[0] != (payment.Receipt{ChargeID: first.ChargeID, Amount: 2598, Currency: "USD"}) {
		t.Fatalf("after one charge: got %+v, %v; want [%+v]", found, err, first)
	}

	if _, err := client.Charge(t.Context(), order("o2")); err != nil { // evicts the key order-o1
		t.Fatalf("Charge o2: %v", err)
	}
	second, err := client.Charge(t.Context(), order("o1"))
	if err != nil || second.Replayed {
		t.Fatalf("Charge o1 under its forgotten key: got %+v, %v; want a new charge", second, err)
	}
	found, err = client.FindCharges(t.Context(), recent("o1"))
	if got, want := strings.Join(chargeIDs(found), ","), first.ChargeID+","+second.ChargeID; err != nil || got != want {
		t.Errorf("after the key was forgotten: got %s, %v; want %s (oldest first)", got, err, want)
	}
}

func TestFindChargesFaultsAreTransient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault   string
		timeout time.Duration
	}{
		{`{"down":true}`, time.Minute},
		{`{"error_rate":1}`, time.Minute},
		{`{"refuse_connections":true}`, time.Minute},
		{`{"hang":true}`, 100 * time.Millisecond},
		{`{"latency":"500ms"}`, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			t.Parallel()
			sim := simtest.Start(t, 0)
			sim.Fault(t, tt.fault)
			ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
			defer cancel()

			_, err := newClient(t, sim.URL).FindCharges(ctx, recent("o1"))
			if !payment.IsTransient(err) || errors.Is(err, payment.ErrPermanent) {
				t.Errorf("got %v, want a transient error only", err)
			}
		})
	}
}

// TestFindChargesClassification covers answers the simulator never gives.
func TestFindChargesClassification(t *testing.T) {
	t.Parallel()
	list := func(items ...string) string {
		return `{"object":"list","url":"/v1/payment_intents","has_more":false,"data":[` + strings.Join(items, ",") + `]}`
	}
	intent := func(id, status, orderID string) string {
		return `{"id":"` + id + `","object":"payment_intent","amount":2598,"currency":"usd","status":"` + status +
			`","metadata":{"order_id":"` + orderID + `"},"created":1800000000}`
	}
	tests := []struct {
		name    string
		status  int
		body    string
		want    error // nil: success
		wantIDs string
	}{
		{"none", http.StatusOK, list(), nil, ""},
		{"one, among other orders'", http.StatusOK, list(intent("pi_2", "succeeded", "o2"), intent("pi_1", "succeeded", "o1")), nil, "pi_1"},
		{"two, oldest first", http.StatusOK, list(intent("pi_3", "succeeded", "o1"), intent("pi_1", "succeeded", "o1")), nil, "pi_1,pi_3"},
		{"a declined PaymentIntent moved no money", http.StatusOK, list(intent("pi_0", "requires_payment_method", "o1"), intent("pi_1", "succeeded", "o1")), nil, "pi_1"},
		{"a canceled one neither", http.StatusOK, list(intent("pi_0", "canceled", "o1")), nil, ""},
		{"a processing one may yet succeed", http.StatusOK, list(intent("pi_2", "processing", "o1")), payment.ErrPending, ""},
		{"one waiting for the customer too", http.StatusOK, list(intent("pi_2", "requires_action", "o1")), payment.ErrPending, ""},
		{"another order's pending one is not ours", http.StatusOK, list(intent("pi_2", "processing", "o2")), nil, ""},
		{"one without an id", http.StatusOK, list(intent("", "succeeded", "o1")), payment.ErrTransient, ""},
		{"not JSON", http.StatusOK, `<html>`, payment.ErrTransient, ""},
		{"400 invalid_request_error", http.StatusBadRequest, `{"error":{"type":"invalid_request_error","message":"x"}}`, payment.ErrPermanent, ""},
		{"401", http.StatusUnauthorized, `{"error":{"type":"invalid_request_error","message":"x"}}`, payment.ErrTransient, ""},
		{"404 not Stripe's: a wrong URL is an outage", http.StatusNotFound, `404 page not found`, payment.ErrTransient, ""},
		{"429", http.StatusTooManyRequests, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"x"}}`, payment.ErrTransient, ""},
		{"503", http.StatusServiceUnavailable, `{"error":{"type":"api_error","message":"x"}}`, payment.ErrTransient, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != "/v1/payment_intents" {
					t.Errorf("request: got %s %s, want GET /v1/payment_intents", r.Method, r.URL)
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)

			got, err := newClient(t, srv.URL).FindCharges(t.Context(), recent("o1"))
			if tt.want == nil {
				if err != nil || strings.Join(chargeIDs(got), ",") != tt.wantIDs {
					t.Errorf("got %+v, %v; want charges %q", got, err, tt.wantIDs)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if got, want := err.Error(), "find charges of order o1: "; !strings.HasPrefix(got, want) {
				t.Errorf("message: got %q, want prefix %q", got, want)
			}
		})
	}
}

// TestFindChargesReadsTheWindowPageByPage: the lookup asks the list for the window's
// PaymentIntents in whole seconds (its start rounded down, its end up), a hundred a page,
// and follows the cursor to the window's end; the order id is not part of the question
// (Stripe's list cannot filter by metadata: the client does), and a charge of the order on
// the third page is found.
func TestFindChargesReadsTheWindowPageByPage(t *testing.T) {
	t.Parallel()
	sim := simtest.Start(t, 0)
	var queries []url.Values
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			queries = append(queries, r.URL.Query())
			mu.Unlock()
		}
		sim.Sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	client := newClient(t, srv.URL)
	mine, err := client.Charge(t.Context(), order("o1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 250 {
		if _, err := client.Charge(t.Context(), order(fmt.Sprint("other-", i))); err != nil {
			t.Fatal(err)
		}
	}
	from, to := time.Now().Add(-90*time.Second+300*time.Millisecond), time.Now().Add(time.Minute+300*time.Millisecond)
	found, err := client.FindCharges(t.Context(), payment.Lookup{OrderID: "o1", CreatedFrom: from, CreatedTo: to})
	if err != nil || len(found) != 1 || found[0].ChargeID != mine.ChargeID {
		t.Fatalf("got %+v, %v; want [%s]", found, err, mine.ChargeID)
	}
	if len(queries) != 3 {
		t.Fatalf("list requests: got %d, want 3 pages of 100 for 251 PaymentIntents", len(queries))
	}
	for i, q := range queries {
		want := url.Values{"created[gte]": {fmt.Sprint(from.Unix())}, "created[lte]": {fmt.Sprint(to.Unix() + 1)}, "limit": {"100"}}
		if i > 0 {
			want.Set("starting_after", queries[i].Get("starting_after"))
			if want.Get("starting_after") == "" {
				t.Errorf("page %d has no cursor", i)
			}
		}
		if q.Encode() != want.Encode() {
			t.Errorf("page %d: query %v, want %v", i, q, want)
		}
	}
}

// Protected.FindCharges runs through the same policy as Charge: it is retried, and an outage
// it meets opens the breaker that charges go through too.
func TestProtectedFindCharges(t *testing.T) {
	t.Parallel()
	sim := simtest.Start(t, 0)
	policy, err := resilience.New("payment", resilience.DefaultConfig(), resilience.Options{
		Classify: payment.Classify, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := payment.NewProtected(newClient(t, sim.URL), policy, nil)

	if _, err := p.Charge(t.Context(), order("o1")); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	found, err := p.FindCharges(t.Context(), recent("o1"))
	if err != nil || len(found) != 1 {
		t.Fatalf("FindCharges: got %+v, %v; want one charge", found, err)
	}

	sim.Fault(t, `{"down":true}`)
	for i := range 20 {
		_, err = p.FindCharges(t.Context(), recent("o1"))
		if payment.IsRefused(err) {
			break
		}
		if !payment.IsTransient(err) {
			t.Fatalf("lookup %d while the provider is down: got %v, want a transient error", i, err)
		}
	}
	if !errors.Is(err, resilience.ErrOpen) {
		t.Fatalf("lookups against a down provider: last error %v, want the breaker open", err)
	}
	if _, err := p.Charge(t.Context(), order("o2")); !errors.Is(err, resilience.ErrOpen) {
		t.Errorf("Charge after lookups opened the breaker: got %v, want %v", err, resilience.ErrOpen)
	}
}

// A lookup refused by the provider once is retried by the policy, like a charge.
func TestProtectedFindChargesRetries(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","data":[],"has_more":false}`))
	}))
	t.Cleanup(srv.Close)
	policy, err := resilience.New("payment", resilience.DefaultConfig(), resilience.Options{
		Classify: payment.Classify, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := payment.NewProtected(newClient(t, srv.URL), policy, nil)
	if _, err := p.FindCharges(t.Context(), recent("o1")); err != nil {
		t.Fatalf("FindCharges: got %v, want success on the second attempt", err)
	}
	if got, want := calls.Load(), int32(2); got != want {
		t.Errorf("provider calls: got %d, want %d", got, want)
	}
}
