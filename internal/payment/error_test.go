package payment_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
)

// pi is a PaymentIntent body as Stripe answers a create for order o1.
func pi(status, amount, currency, orderID string) string {
	return `{"id":"pi_1","object":"payment_intent","amount":` + amount + `,"currency":"` + currency + `","status":"` + status +
		`","metadata":{"order_id":"` + orderID + `"},"created":1800000000,"latest_charge":"ch_1"}`
}

// stripeError is Stripe's error object.
func stripeError(typ, code string) string {
	return `{"error":{"type":"` + typ + `","code":"` + code + `","message":"x"}}`
}

// TestClassification is the classification table (docs/design.md, "Classification"): each
// answer a provider speaking Stripe's API may give a create, with the kind it maps to, the
// class the resilience stack gives it (Final: no retry, no breaker failure), and the
// predicates the order flow branches on. A provider answering with a fixed status, headers
// and body gives each.
func TestClassification(t *testing.T) {
	t.Parallel()
	type want struct {
		kind       error // nil: success
		class      resilience.Class
		inProgress bool
		throttled  bool
		keyReused  bool
		retryAfter time.Duration
	}
	final := resilience.Final
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   want
	}{
		{"succeeded", http.StatusOK, nil, pi("succeeded", "2598", "usd", "o1"), want{}},
		{"402 card_error: declined", http.StatusPaymentRequired, nil,
			`{"error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","message":"x","payment_intent":` + pi("requires_payment_method", "2598", "usd", "o1") + `}}`,
			want{kind: payment.ErrDeclined, class: final}},
		{"400 invalid_request_error: our bad request", http.StatusBadRequest, nil, stripeError("invalid_request_error", "parameter_unknown"),
			want{kind: payment.ErrPermanent, class: final}},
		{"404 invalid_request_error: a payment method the provider does not know", http.StatusNotFound, nil, stripeError("invalid_request_error", "resource_missing"),
			want{kind: payment.ErrPermanent, class: final}},
		{"400 idempotency_error: our bug, the key's first request may have charged", http.StatusBadRequest, nil, stripeError("idempotency_error", ""),
			want{kind: payment.ErrTransient, class: final, keyReused: true}},
		{"409 idempotency_key_in_use: in progress", http.StatusConflict, nil, stripeError("invalid_request_error", "idempotency_key_in_use"),
			want{kind: payment.ErrTransient, class: final, inProgress: true}},
		{"429 rate_limit with Retry-After", http.StatusTooManyRequests, http.Header{"Retry-After": {"3"}}, stripeError("invalid_request_error", "rate_limit"),
			want{kind: payment.ErrTransient, class: final, throttled: true, retryAfter: 3 * time.Second}},
		{"429 lock_timeout without Retry-After", http.StatusTooManyRequests, http.Header{"Stripe-Should-Retry": {"true"}}, stripeError("invalid_request_error", "lock_timeout"),
			want{kind: payment.ErrTransient, class: final, throttled: true, retryAfter: payment.DefaultThrottleWait}},
		{"401: a rotated key is an outage, not a rejection", http.StatusUnauthorized, nil, stripeError("invalid_request_error", ""),
			want{kind: payment.ErrTransient, class: resilience.Transient}},
		{"403", http.StatusForbidden, nil, stripeError("invalid_request_error", ""), want{kind: payment.ErrTransient, class: resilience.Transient}},
		{"500 api_error", http.StatusInternalServerError, nil, stripeError("api_error", ""), want{kind: payment.ErrTransient, class: resilience.Transient}},
		{"500 api_error, Stripe-Should-Retry: false", http.StatusInternalServerError, http.Header{"Stripe-Should-Retry": {"false"}}, stripeError("api_error", ""),
			want{kind: payment.ErrTransient, class: resilience.Unretryable}},
		{"503 api_error", http.StatusServiceUnavailable, nil, stripeError("api_error", ""), want{kind: payment.ErrTransient, class: resilience.Transient}},
		{"502 from a proxy, HTML", http.StatusBadGateway, nil, `<html>`, want{kind: payment.ErrTransient, class: resilience.Transient}},
		{"404 from a wrong base URL, not Stripe's JSON", http.StatusNotFound, nil, `404 page not found`, want{kind: payment.ErrTransient, class: resilience.Transient}},
		{"redirect", http.StatusFound, http.Header{"Location": {"/elsewhere"}}, ``, want{kind: payment.ErrTransient, class: resilience.Transient}},
		{"200 processing: pending", http.StatusOK, nil, pi("processing", "2598", "usd", "o1"), want{kind: payment.ErrPending, class: final}},
		{"200 requires_action: pending", http.StatusOK, nil, pi("requires_action", "2598", "usd", "o1"), want{kind: payment.ErrPending, class: final}},
		{"200 requires_payment_method: no answer to a confirmed create", http.StatusOK, nil, pi("requires_payment_method", "2598", "usd", "o1"),
			want{kind: payment.ErrTransient, class: resilience.Transient}},
		{"200, not JSON", http.StatusOK, nil, `<html>`, want{kind: payment.ErrTransient, class: resilience.Transient}},
		{"200, huge body", http.StatusOK, nil, `{"id":"pi_1","x":"` + strings.Repeat("a", 1<<20) + `"}`, want{kind: payment.ErrTransient, class: resilience.Transient}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client := fixedProvider(t, tt.status, tt.header, tt.body)
			_, err := client.Charge(t.Context(), order("o1"))
			if tt.want.kind == nil {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				return
			}
			kinds := map[error]bool{payment.ErrDeclined: false, payment.ErrPermanent: false, payment.ErrPending: false, payment.ErrTransient: false}
			for k := range kinds {
				if got := errors.Is(err, k); got != errors.Is(k, tt.want.kind) {
					t.Errorf("errors.Is(%v, %v) = %v", err, k, got)
				}
			}
			if got := payment.Classify(err); got != tt.want.class {
				t.Errorf("Classify: got %v, want %v", got, tt.want.class)
			}
			if got := payment.IsInProgress(err); got != tt.want.inProgress {
				t.Errorf("IsInProgress = %v", got)
			}
			if got := payment.IsThrottled(err); got != tt.want.throttled {
				t.Errorf("IsThrottled = %v", got)
			}
			if got := payment.IsKeyReused(err); got != tt.want.keyReused {
				t.Errorf("IsKeyReused = %v", got)
			}
			if got, _ := payment.RetryAfterOf(err); got != tt.want.retryAfter {
				t.Errorf("RetryAfterOf = %v, want %v", got, tt.want.retryAfter)
			}
		})
	}
}

// fixedProvider answers every request with status, header and body, after checking what
// the client sends with a create: our key, the order's idempotency key, a form body.
func fixedProvider(t *testing.T, status int, header http.Header, body string) *payment.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got, want := r.Header.Get("Authorization"), "Bearer sk_test_checkout"; got != want {
			t.Errorf("Authorization: got %q, want %q", got, want)
		}
		if r.Method == http.MethodPost {
			if got, want := r.Header.Get("Idempotency-Key"), "order-o1"; got != want {
				t.Errorf("Idempotency-Key: got %q, want %q", got, want)
			}
			if got, want := r.URL.Path, "/v1/payment_intents"; got != want {
				t.Errorf("path: got %q, want %q", got, want)
			}
		}
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	client, err := payment.NewClient(payment.Config{BaseURL: srv.URL, SecretKey: "sk_test_checkout"})
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
		{"another amount", pi("succeeded", "1", "usd", "o1"),
			payment.ReceiptMismatchError{ChargeID: "pi_1", WantAmount: 2598, GotAmount: 1, WantCurrency: "USD", GotCurrency: "USD", WantReference: "o1", GotReference: "o1"}},
		{"another currency", pi("succeeded", "2598", "eur", "o1"),
			payment.ReceiptMismatchError{ChargeID: "pi_1", WantAmount: 2598, GotAmount: 2598, WantCurrency: "USD", GotCurrency: "EUR", WantReference: "o1", GotReference: "o1"}},
		{"another order", pi("succeeded", "2598", "usd", "o2"),
			payment.ReceiptMismatchError{ChargeID: "pi_1", WantAmount: 2598, GotAmount: 2598, WantCurrency: "USD", GotCurrency: "USD", WantReference: "o1", GotReference: "o2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := fixedProvider(t, http.StatusOK, nil, tt.body).Charge(t.Context(), order("o1"))
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

func TestNewClientRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "localhost:8082", "ftp://provider", "http://", "://x", "http://provider/v1"} {
		if _, err := payment.NewClient(payment.Config{BaseURL: u, SecretKey: "sk_test_x"}); err == nil {
			t.Errorf("NewClient(%q): got nil error, want one", u)
		}
	}
	if _, err := payment.NewClient(payment.Config{BaseURL: "http://provider"}); err == nil {
		t.Error("NewClient without a secret key: got nil error, want one")
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
			p := payment.NewProtected(fixedProvider(t, tt.status, nil, stripeError("invalid_request_error", "idempotency_key_in_use")), policy, nil)
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

// TestTheSDKDoesNotRetry: Stripe's SDK retries by default, twice — a 429 lock_timeout, any
// answer that is not Stripe's JSON (a proxy's 502 page), a connection error — reusing the
// key, sleeping with time.Sleep (deaf to the caller's deadline) and invisible to the breaker
// and the request budget. Our retry layer owns retries: one Charge is one request, whatever
// the answer.
func TestTheSDKDoesNotRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter)
	}{
		{"429 lock_timeout", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(stripeError("invalid_request_error", "lock_timeout")))
		}},
		{"502 from a proxy", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(`<html>bad gateway</html>`))
		}},
		{"connection dropped", func(w http.ResponseWriter) { panic(http.ErrAbortHandler) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				tt.answer(w)
			}))
			t.Cleanup(srv.Close)
			client, err := payment.NewClient(payment.Config{BaseURL: srv.URL, SecretKey: "sk_test_checkout"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Charge(t.Context(), order("o1")); !payment.IsTransient(err) {
				t.Fatalf("got %v, want a transient error", err)
			}
			if got := calls.Load(); got != 1 {
				t.Errorf("requests for one Charge: got %d, want 1", got)
			}
		})
	}
}
