package payment_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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
	client, err := payment.NewClient(payment.Config{BaseURL: url})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(client.CloseIdleConnections)
	return client
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

	none, err := client.FindCharges(t.Context(), "o1")
	if err != nil || len(none) != 0 {
		t.Fatalf("before any charge: got %v, %v; want no charges and no error", none, err)
	}

	first, err := client.Charge(t.Context(), order("o1"))
	if err != nil {
		t.Fatalf("Charge o1: %v", err)
	}
	found, err := client.FindCharges(t.Context(), "o1")
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
	found, err = client.FindCharges(t.Context(), "o1")
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

			_, err := newClient(t, sim.URL).FindCharges(ctx, "o1")
			if !payment.IsTransient(err) || errors.Is(err, payment.ErrPermanent) {
				t.Errorf("got %v, want a transient error only", err)
			}
		})
	}
}

// TestFindChargesClassification covers answers the simulator never gives.
func TestFindChargesClassification(t *testing.T) {
	t.Parallel()
	const (
		ok      = `{"id":"ch_1","status":"succeeded","amount":2598,"currency":"USD","reference":"o1"}`
		failed  = `{"id":"ch_0","status":"failed","amount":2598,"currency":"USD","reference":"o1"}`
		pending = `{"id":"ch_2","status":"pending","amount":2598,"currency":"USD","reference":"o1"}`
		other   = `{"id":"ch_3","status":"succeeded","amount":2598,"currency":"USD","reference":"o2"}`
		noID    = `{"status":"succeeded","amount":2598,"currency":"USD","reference":"o1"}`
	)
	tests := []struct {
		name    string
		status  int
		body    string
		want    error // nil: success
		wantIDs string
	}{
		{"none", http.StatusOK, `{"data":[]}`, nil, ""},
		{"one", http.StatusOK, `{"data":[` + ok + `]}`, nil, "ch_1"},
		{"a failed charge moved no money", http.StatusOK, `{"data":[` + failed + `,` + ok + `]}`, nil, "ch_1"},
		{"a pending charge may yet succeed", http.StatusOK, `{"data":[` + pending + `]}`, payment.ErrTransient, ""},
		{"a charge of another order", http.StatusOK, `{"data":[` + ok + `,` + other + `]}`, payment.ErrTransient, ""},
		{"a charge without an id", http.StatusOK, `{"data":[` + noID + `]}`, payment.ErrTransient, ""},
		{"no data list", http.StatusOK, `{}`, payment.ErrTransient, ""},
		{"null data", http.StatusOK, `{"data":null}`, payment.ErrTransient, ""},
		{"not JSON", http.StatusOK, `<html>`, payment.ErrTransient, ""},
		{"bad request", http.StatusBadRequest, `{"error":{"type":"invalid_request_error","message":"x"}}`, payment.ErrPermanent, ""},
		{"unprocessable", http.StatusUnprocessableEntity, ``, payment.ErrPermanent, ""},
		{"402 is no decline here", http.StatusPaymentRequired, ``, payment.ErrTransient, ""},
		{"not found: a wrong URL is an outage", http.StatusNotFound, ``, payment.ErrTransient, ""},
		{"too many requests", http.StatusTooManyRequests, ``, payment.ErrTransient, ""},
		{"unavailable", http.StatusServiceUnavailable, ``, payment.ErrTransient, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != "/v1/charges" || r.URL.RawQuery != "reference=o1" {
					t.Errorf("request: got %s %s, want GET /v1/charges?reference=o1", r.Method, r.URL)
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)

			got, err := newClient(t, srv.URL).FindCharges(t.Context(), "o1")
			if tt.want == nil {
				if err != nil || strings.Join(chargeIDs(got), ",") != tt.wantIDs {
					t.Errorf("got %+v, %v; want charges %q", got, err, tt.wantIDs)
				}
				return
			}
			var perr *payment.Error
			if !errors.Is(err, tt.want) || !errors.As(err, &perr) || perr.StatusCode != tt.status {
				t.Fatalf("got %v, want a %v *payment.Error with status %d", err, tt.want, tt.status)
			}
			if got, want := err.Error(), "find charges of order o1: "; !strings.HasPrefix(got, want) {
				t.Errorf("message: got %q, want prefix %q", got, want)
			}
		})
	}
}

// The lookup reserves the query string for the reference: an order id is escaped, not
// spliced in.
func TestFindChargesEscapesTheReference(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.Query())
		_, _ = w.Write([]byte(`{"data":[]}`))
	}))
	t.Cleanup(srv.Close)
	if _, err := newClient(t, srv.URL).FindCharges(t.Context(), "a&limit=1#x"); err != nil {
		t.Fatal(err)
	}
	if q := got.Load().(url.Values); len(q) != 1 || len(q["reference"]) != 1 || q["reference"][0] != "a&limit=1#x" {
		t.Errorf("query: got %v, want only reference=a&limit=1#x", q)
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
	p := payment.NewProtected(newClient(t, sim.URL), policy)

	if _, err := p.Charge(t.Context(), order("o1")); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	found, err := p.FindCharges(t.Context(), "o1")
	if err != nil || len(found) != 1 {
		t.Fatalf("FindCharges: got %+v, %v; want one charge", found, err)
	}

	sim.Fault(t, `{"down":true}`)
	for i := range 20 {
		_, err = p.FindCharges(t.Context(), "o1")
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
		_, _ = w.Write([]byte(`{"data":[]}`))
	}))
	t.Cleanup(srv.Close)
	policy, err := resilience.New("payment", resilience.DefaultConfig(), resilience.Options{
		Classify: payment.Classify, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := payment.NewProtected(newClient(t, srv.URL), policy)
	if _, err := p.FindCharges(t.Context(), "o1"); err != nil {
		t.Fatalf("FindCharges: got %v, want success on the second attempt", err)
	}
	if got, want := calls.Load(), int32(2); got != want {
		t.Errorf("provider calls: got %d, want %d", got, want)
	}
}
