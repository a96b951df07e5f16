package payment_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
)

// TestClassification covers responses the simulator never sends, from a provider answering
// with a fixed status and body.
func TestClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   error // nil: success
	}{
		{"created", http.StatusCreated, `{"id":"ch_1","status":"succeeded","amount":2598,"currency":"USD","reference":"o1"}`, nil},
		{"created for another amount", http.StatusCreated, `{"id":"ch_1","status":"succeeded","amount":1,"currency":"USD","reference":"o1"}`, payment.ErrTransient},
		{"created for another order", http.StatusCreated, `{"id":"ch_1","status":"succeeded","amount":2598,"currency":"USD","reference":"o2"}`, payment.ErrTransient},
		{"declined without a body", http.StatusPaymentRequired, ``, payment.ErrDeclined},
		{"bad request", http.StatusBadRequest, `{"error":{"type":"invalid_request_error","message":"x"}}`, payment.ErrPermanent},
		{"unauthorized: a rotated key is an outage, not a rejection", http.StatusUnauthorized, ``, payment.ErrTransient},
		{"not found: a wrong URL is an outage", http.StatusNotFound, `404 page not found`, payment.ErrTransient},
		{"redirect", http.StatusFound, ``, payment.ErrTransient},
		{"unprocessable", http.StatusUnprocessableEntity, ``, payment.ErrPermanent},
		{"conflict", http.StatusConflict, ``, payment.ErrTransient},
		{"too many requests: throttled, not final for the order", http.StatusTooManyRequests, ``, payment.ErrTransient},
		{"internal error", http.StatusInternalServerError, ``, payment.ErrTransient},
		{"bad gateway HTML", http.StatusBadGateway, `<html>`, payment.ErrTransient},
		{"unavailable", http.StatusServiceUnavailable, ``, payment.ErrTransient},
		{"created, not JSON", http.StatusCreated, `<html>`, payment.ErrTransient},
		{"created, no id", http.StatusCreated, `{"status":"succeeded"}`, payment.ErrTransient},
		{"created, failed", http.StatusCreated, `{"id":"ch_1","status":"failed"}`, payment.ErrTransient},
		{"created, huge body", http.StatusCreated, `{"id":"ch_1","status":"succeeded","x":"` + strings.Repeat("a", 70<<10) + `"}`, payment.ErrTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client := fixedProvider(t, tt.status, tt.body)
			_, err := client.Charge(t.Context(), order("o1"))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			var perr *payment.Error
			if !errors.As(err, &perr) || perr.StatusCode != tt.status {
				t.Errorf("status in error: got %+v, want %d", perr, tt.status)
			}
		})
	}
}

// fixedProvider answers every charge with status and body, after checking what the client
// sends.
func fixedProvider(t *testing.T, status int, body string) *payment.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got, want := r.Header.Get("Idempotency-Key"), "order-o1"; got != want {
			t.Errorf("Idempotency-Key: got %q, want %q", got, want)
		}
		if got, want := r.URL.Path, "/v1/charges"; got != want {
			t.Errorf("path: got %q, want %q", got, want)
		}
		if status == http.StatusFound {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	client, err := payment.NewClient(payment.Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return client
}

// A 2xx for a charge other than the one requested means the provider holds a charge: the
// attempt must not be a rejection (which would fail the order as provider_rejected), and it
// carries what was asked and what was reported.
func TestReceiptMismatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want payment.ReceiptMismatchError
	}{
		{"another amount", `{"id":"ch_1","status":"succeeded","amount":1,"currency":"USD","reference":"o1"}`,
			payment.ReceiptMismatchError{ChargeID: "ch_1", WantAmount: 2598, GotAmount: 1, WantCurrency: "USD", GotCurrency: "USD", WantReference: "o1", GotReference: "o1"}},
		{"another currency", `{"id":"ch_1","status":"succeeded","amount":2598,"currency":"EUR","reference":"o1"}`,
			payment.ReceiptMismatchError{ChargeID: "ch_1", WantAmount: 2598, GotAmount: 2598, WantCurrency: "USD", GotCurrency: "EUR", WantReference: "o1", GotReference: "o1"}},
		{"another reference", `{"id":"ch_1","status":"succeeded","amount":2598,"currency":"USD","reference":"o2"}`,
			payment.ReceiptMismatchError{ChargeID: "ch_1", WantAmount: 2598, GotAmount: 2598, WantCurrency: "USD", GotCurrency: "USD", WantReference: "o1", GotReference: "o2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := fixedProvider(t, http.StatusCreated, tt.body).Charge(t.Context(), order("o1"))
			mismatch, ok := errors.AsType[*payment.ReceiptMismatchError](err)
			if !ok || *mismatch != tt.want {
				t.Fatalf("got %v, want a *payment.ReceiptMismatchError %+v", err, tt.want)
			}
			if errors.Is(err, payment.ErrPermanent) || payment.IsDeclined(err) || !payment.IsTransient(err) {
				t.Errorf("kind of %v: want ErrTransient only, never a rejection", err)
			}
			if got := payment.Classify(err); got != resilience.Transient {
				t.Errorf("Classify: got %v, want Transient (a breaker failure)", got)
			}
		})
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	if got, want := payment.IdempotencyKey("0b9f6f7e-1c1a-4d43-9b8e-2f3c4d5e6f70"), "order-0b9f6f7e-1c1a-4d43-9b8e-2f3c4d5e6f70"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestNewClientRejectsBadURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "localhost:8082", "ftp://provider", "http://", "://x"} {
		if _, err := payment.NewClient(payment.Config{BaseURL: u}); err == nil {
			t.Errorf("NewClient(%q): got nil error, want one", u)
		}
	}
}

// TestInProgressIsNoBreakerFailure: a 409 says another call with the same key is still in
// progress at the provider. The order is not charged yet (ErrTransient), but the provider
// answered at once: ten of them in a row leave the breaker closed, where ten 500s open it.
func TestInProgressIsNoBreakerFailure(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status   int
		wantOpen bool
	}{
		{http.StatusConflict, false},
		{http.StatusInternalServerError, true},
	} {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			t.Parallel()
			cfg := resilience.DefaultConfig()
			cfg.MaxAttempts = 1
			policy, err := resilience.New("payment", cfg, resilience.Options{Classify: payment.Classify})
			if err != nil {
				t.Fatal(err)
			}
			p := payment.NewProtected(fixedProvider(t, tt.status, `{"error":{"type":"idempotency_error","message":"in progress"}}`), policy)
			for range 10 {
				_, err := p.Charge(t.Context(), order("o1"))
				if !payment.IsTransient(err) {
					t.Fatalf("err = %v, want ErrTransient", err)
				}
			}
			if got := policy.State() == resilience.StateOpen; got != tt.wantOpen {
				t.Errorf("after ten %d answers: breaker open = %v, want %v", tt.status, got, tt.wantOpen)
			}
		})
	}
}
