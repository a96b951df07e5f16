package payment_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// TestThrottledIsNoBreakerFailure: a provider over its rate limit answers 429 at once,
// charges nothing and says when to come back. Twenty of them leave the breaker closed (ten
// failures open it), none is retried within the call (an immediate retry meets the same
// limit), and each carries the simulator's Retry-After of one second.
func TestThrottledIsNoBreakerFailure(t *testing.T) {
	t.Parallel()
	sim := simtest.StartConfig(t, paymentsim.Config{RateLimit: 1})
	policy, err := resilience.New("payment", resilience.DefaultConfig(), resilience.Options{Classify: payment.Classify})
	if err != nil {
		t.Fatal(err)
	}
	client, err := payment.NewClient(payment.Config{BaseURL: sim.URL, SecretKey: "sk_test_checkout"})
	if err != nil {
		t.Fatal(err)
	}

	const want = 20
	throttled, charged := 0, 0
	for i := 0; throttled < want; i++ {
		// Through the policy alone: Protected would hold the calls after
		// the first 429 back (TestProtectedHoldsCallsBackUntilRetryAfter).
		_, err := resilience.Do(t.Context(), policy, func(ctx context.Context) (payment.Receipt, error) {
			return client.Charge(ctx, order("o"+strconv.Itoa(i)))
		})
		if err == nil { // the bucket's one token, or one that refilled meanwhile
			charged++
			continue
		}
		wait, ok := payment.RetryAfterOf(err)
		if !payment.IsThrottled(err) || !ok || !payment.IsTransient(err) {
			t.Fatalf("charge %d: err = %v, want a throttled ErrTransient", i, err)
		}
		if wait != time.Second {
			t.Errorf("charge %d: RetryAfterOf = %v, want the simulator's Retry-After of 1s", i, wait)
		}
		if got := payment.Classify(err); got != resilience.Final {
			t.Errorf("Classify(%v) = %v, want Final", err, got)
		}
		throttled++
	}
	if got := policy.State(); got != resilience.StateClosed {
		t.Errorf("after %d throttled charges: breaker %v, want closed", want, got)
	}
	st := sim.Stats(t)
	if st.RateLimited != want || st.TotalCharges != charged {
		t.Errorf("provider: %d answered 429, %d charged; want %d and %d (no retry within a call)", st.RateLimited, st.TotalCharges, want, charged)
	}
}

// TestRetryAfter covers Retry-After headers the simulator never sends (it sends whole
// seconds): an HTTP-date, none, nonsense, and a wait too long to honour. The lookup and the
// list are throttled alike, as Stripe limits every request.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header func() string
		min    time.Duration
		max    time.Duration
	}{
		{"seconds", func() string { return "5" }, 5 * time.Second, 5 * time.Second},
		{"an HTTP-date", func() string { return time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat) }, 8 * time.Second, 10 * time.Second},
		{"absent", func() string { return "" }, payment.DefaultThrottleWait, payment.DefaultThrottleWait},
		{"zero", func() string { return "0" }, payment.DefaultThrottleWait, payment.DefaultThrottleWait},
		{"unreadable", func() string { return "soon" }, payment.DefaultThrottleWait, payment.DefaultThrottleWait},
		{"a date past", func() string { return "Mon, 01 Jan 2001 00:00:00 GMT" }, payment.DefaultThrottleWait, payment.DefaultThrottleWait},
		{"a day, capped", func() string { return "86400" }, payment.MaxThrottleWait, payment.MaxThrottleWait},
		{"a date next year, capped", func() string { return time.Now().AddDate(1, 0, 0).UTC().Format(http.TimeFormat) }, payment.MaxThrottleWait, payment.MaxThrottleWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if h := tt.header(); h != "" {
					w.Header().Set("Retry-After", h)
				}
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"rate_limit","message":"slow down"}}`))
			}))
			t.Cleanup(srv.Close)
			client, err := payment.NewClient(payment.Config{BaseURL: srv.URL, SecretKey: "sk_test_checkout"})
			if err != nil {
				t.Fatal(err)
			}
			_, chargeErr := client.Charge(t.Context(), order("o1"))
			_, lookupErr := client.FindCharges(t.Context(), recent("o1"))
			_, listErr := client.ListCharges(t.Context(), payment.ListQuery{Limit: 10})
			for call, err := range map[string]error{"charge": chargeErr, "lookup": lookupErr, "list": listErr} {
				wait, ok := payment.RetryAfterOf(err)
				if !ok || wait < tt.min || wait > tt.max {
					t.Errorf("%s: RetryAfterOf(%v) = %v, %v; want %v to %v", call, err, wait, ok, tt.min, tt.max)
				}
				if !payment.IsTransient(err) || payment.Classify(err) != resilience.Final {
					t.Errorf("%s: %v: want ErrTransient classified Final", call, err)
				}
			}
		})
	}
}

// TestRetryAfterOfOtherErrors: only a 429 asks for a wait.
func TestRetryAfterOfOtherErrors(t *testing.T) {
	t.Parallel()
	for _, err := range []error{nil, errors.New("x"), &payment.Error{Kind: payment.ErrTransient, StatusCode: http.StatusServiceUnavailable}} {
		if wait, ok := payment.RetryAfterOf(err); ok || wait != 0 {
			t.Errorf("RetryAfterOf(%v) = %v, %v; want 0, false", err, wait, ok)
		}
	}
}

// TestProtectedHoldsCallsBackUntilRetryAfter: after a 429 the provider
// refuses every call until its Retry-After has passed, so the client sends
// none: it refuses them itself (IsRefused, as the breaker's refusals) and
// says how long is left in RetryAfter, which the worker snoozes by.
func TestProtectedHoldsCallsBackUntilRetryAfter(t *testing.T) {
	t.Parallel()
	sim := simtest.StartConfig(t, paymentsim.Config{RateLimit: 1})
	p, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: sim.URL, SecretKey: "sk_test_checkout"}, resilience.DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Charge(t.Context(), order("o1")); err != nil {
		t.Fatalf("first charge: %v, want the bucket's one token", err)
	}
	if _, err := p.Charge(t.Context(), order("o2")); !payment.IsThrottled(err) {
		t.Fatalf("second charge: %v, want a 429", err)
	}
	if wait := p.RetryAfter(); wait < 900*time.Millisecond || wait > time.Second {
		t.Errorf("RetryAfter = %v, want what is left of the 429's 1s", wait)
	}
	for _, call := range []func() error{
		func() error { _, err := p.Charge(t.Context(), order("o3")); return err },
		func() error { _, err := p.FindCharges(t.Context(), recent("o3")); return err },
		func() error { _, err := p.ListCharges(t.Context(), payment.ListQuery{Limit: 10}); return err },
	} {
		if err := call(); !errors.Is(err, payment.ErrHeldBack) || !payment.IsRefused(err) {
			t.Errorf("call within the Retry-After: %v, want ErrHeldBack, refused", err)
		}
	}
	if st := sim.Stats(t); st.RateLimited != 1 || st.TotalCharges != 1 {
		t.Errorf("provider: %d answered 429, %d charged; want 1 and 1 (nothing sent within the Retry-After)", st.RateLimited, st.TotalCharges)
	}
}
