package payment_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
)

// bundle is a client talking over real HTTP to a simulator, the provider the demo runs.
type bundle struct {
	client *payment.Client
	sim    *paymentsim.Simulator
	url    string
}

func setup(t *testing.T, latency time.Duration) *bundle {
	t.Helper()
	sim := paymentsim.New(paymentsim.Config{Latency: latency})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	// httptest.Server.Close waits for active handlers, and a request held by
	// a hang fault whose client left unnoticed would block it forever: end
	// every fault first (cleanups run last-in, first-out).
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/admin/faults", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	client, err := payment.NewClient(payment.Config{BaseURL: srv.URL, SecretKey: "sk_test_checkout", MaxConns: 8})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(client.CloseIdleConnections)
	return &bundle{client: client, sim: sim, url: srv.URL}
}

// admin calls the simulator's admin API the way an experiment script does.
func (b *bundle) admin(t *testing.T, method, path, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s %s: status %d", method, path, body, resp.StatusCode)
	}
}

func (b *bundle) charges(t *testing.T, orderID string) int {
	t.Helper()
	<-b.sim.Idle() // charges whose client left are still being recorded
	return b.sim.Stats().ChargesByReference[orderID]
}

func order(id string) payment.ChargeRequest {
	return payment.ChargeRequest{OrderID: id, Amount: 2598, Currency: "USD", PaymentMethod: "pm_card_visa"}
}

func TestChargeSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	got, err := b.client.Charge(t.Context(), order("o1"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if !strings.HasPrefix(got.ChargeID, "pi_") || got.Amount != 2598 || got.Currency != "USD" || got.Replayed {
		t.Errorf("receipt: got %+v, want a fresh pi_… PaymentIntent of 2598 USD", got)
	}
	if got, want := b.charges(t, "o1"), 1; got != want {
		t.Errorf("charges for o1: got %d, want %d", got, want)
	}
}

func TestChargeReplayReturnsOriginalCharge(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	first, err := b.client.Charge(t.Context(), order("o1"))
	if err != nil {
		t.Fatalf("first Charge: %v", err)
	}
	again, err := b.client.Charge(t.Context(), order("o1"))
	if err != nil {
		t.Fatalf("second Charge: %v", err)
	}
	if got, want := again.ChargeID, first.ChargeID; got != want {
		t.Errorf("replayed charge id: got %q, want %q", got, want)
	}
	if !again.Replayed {
		t.Error("second Charge: Replayed = false, want true")
	}
	if got, want := b.charges(t, "o1"), 1; got != want {
		t.Errorf("charges for o1: got %d, want %d", got, want)
	}
}

func TestConcurrentChargesOfOneOrderChargeOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 100*time.Millisecond)
	const n = 8
	var wg sync.WaitGroup
	receipts := make([]payment.Receipt, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { receipts[i], errs[i] = b.client.Charge(t.Context(), order("o1")) })
	}
	wg.Wait()

	ids := map[string]bool{}
	for i, err := range errs {
		switch {
		case err == nil:
			ids[receipts[i].ChargeID] = true
		case !payment.IsTransient(err): // 409 while the first is in flight
			t.Errorf("call %d: got %v, want success or a transient error", i, err)
		}
	}
	if got, want := len(ids), 1; got != want {
		t.Errorf("distinct charge ids: got %d (%v), want %d", got, ids, want)
	}
	if got, want := b.charges(t, "o1"), 1; got != want {
		t.Errorf("charges for o1: got %d, want %d", got, want)
	}
}

// TestKeyReusedWithOtherParamsIsOurBugNotAFailure: the provider refuses the
// key reused with other parameters (400 idempotency_error). The key's first
// request charged, so the answer must not fail the order: it is transient
// for the order, final for the stack, and flagged for an alert.
func TestKeyReusedWithOtherParamsIsOurBugNotAFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	if _, err := b.client.Charge(t.Context(), order("o1")); err != nil {
		t.Fatalf("first Charge: %v", err)
	}
	changed := order("o1")
	changed.Amount++
	_, err := b.client.Charge(t.Context(), changed)

	var perr *payment.Error
	if !payment.IsKeyReused(err) || !payment.IsTransient(err) || !errors.As(err, &perr) {
		t.Fatalf("got %v, want a transient *payment.Error with IsKeyReused", err)
	}
	if got, want := perr.StatusCode, http.StatusBadRequest; got != want {
		t.Errorf("status: got %d, want %d", got, want)
	}
	if errors.Is(err, payment.ErrPermanent) {
		t.Error("a reused key is ErrPermanent: the order would fail although its first request charged")
	}
	if got := payment.Classify(err); got != resilience.Final {
		t.Errorf("Classify = %v, want Final: a retry gets the same answer", got)
	}
}

// TestAuthenticationRequiredIsPending: a card that asks for 3-D Secure
// leaves the PaymentIntent requires_action: neither paid nor declined, and
// no breaker failure.
func TestAuthenticationRequiredIsPending(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	req := order("o1")
	req.PaymentMethod = "pm_card_authenticationRequired"
	_, err := b.client.Charge(t.Context(), req)
	var perr *payment.Error
	if !payment.IsPending(err) || !errors.As(err, &perr) || perr.Code != "requires_action" || !strings.HasPrefix(perr.PaymentIntent, "pi_") {
		t.Fatalf("got %v, want ErrPending for a PaymentIntent in requires_action", err)
	}
	if payment.IsTransient(err) || payment.IsDeclined(err) || payment.Classify(err) != resilience.Final {
		t.Errorf("%v: want only ErrPending, final for the stack", err)
	}
}

func TestDeclineIsDeclined(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	req := order("o1")
	req.PaymentMethod = "pm_card_chargeDeclined"
	_, err := b.client.Charge(t.Context(), req)

	var perr *payment.Error
	if !payment.IsDeclined(err) || !errors.As(err, &perr) {
		t.Fatalf("got %v, want an ErrDeclined *payment.Error", err)
	}
	if perr.Type != "card_error" || perr.Code != "card_declined" || perr.DeclineCode != "generic_decline" || !strings.HasPrefix(perr.PaymentIntent, "pi_") {
		t.Errorf("error: got %+v, want a card_error card_declined/generic_decline naming its PaymentIntent", perr)
	}
	if got, want := err.Error(), "charge order o1: "; !strings.HasPrefix(got, want) {
		t.Errorf("message: got %q, want prefix %q", got, want)
	}
	if got := b.charges(t, "o1"); got != 0 {
		t.Errorf("charges for a declined order: got %d, want 0", got)
	}
}

func TestFaultsAreTransient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault   string
		timeout time.Duration // the caller's per-attempt deadline
	}{
		{`{"down":true}`, time.Minute},
		{`{"error_rate":1}`, time.Minute},
		{`{"refuse_connections":true}`, time.Minute},
		{`{"reset_after_charge":true}`, time.Minute},
		{`{"hang":true}`, 100 * time.Millisecond},
		{`{"latency":"500ms"}`, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 0)
			b.admin(t, http.MethodPost, "/admin/faults", tt.fault)
			ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
			defer cancel()

			_, err := b.client.Charge(ctx, order("o1"))
			if !payment.IsTransient(err) {
				t.Errorf("got %v, want a transient error", err)
			}
			if payment.IsDeclined(err) || errors.Is(err, payment.ErrPermanent) {
				t.Errorf("%v matches another kind too", err)
			}
		})
	}
}

func TestTimeoutLeavesProviderProcessing(t *testing.T) {
	t.Parallel()
	b := setup(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()

	_, err := b.client.Charge(ctx, order("o1"))
	if !payment.IsTransient(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a transient error caused by the deadline", err)
	}
	// The client gave up; the provider has not.
	if got, want := b.sim.Stats().InFlight, 1; got != want {
		t.Errorf("in flight after the client timed out: got %d, want %d", got, want)
	}
	if got, want := b.charges(t, "o1"), 1; got != want {
		t.Errorf("charges for o1 once processing ended: got %d, want %d", got, want)
	}
	receipt, err := b.client.Charge(t.Context(), order("o1"))
	if err != nil || !receipt.Replayed {
		t.Errorf("retry after the timeout: got %+v, %v; want the replayed charge", receipt, err)
	}
}

func TestLostResponseRetriedChargesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.admin(t, http.MethodPost, "/admin/faults", `{"reset_after_charge":true}`)
	if _, err := b.client.Charge(t.Context(), order("o1")); !payment.IsTransient(err) {
		t.Fatalf("charge with a lost response: got %v, want a transient error", err)
	}
	b.admin(t, http.MethodDelete, "/admin/faults", "")

	receipt, err := b.client.Charge(t.Context(), order("o1"))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !receipt.Replayed {
		t.Error("retry: Replayed = false, want true (the first attempt had charged)")
	}
	if got, want := b.charges(t, "o1"), 1; got != want {
		t.Errorf("charges for o1: got %d, want %d", got, want)
	}
}
