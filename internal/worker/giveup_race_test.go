package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/order"
)

// gatedPayer holds the worker's lookup and the API's charge at gates the
// test opens, so the two can be interleaved in the order it chooses.
type gatedPayer struct {
	order.Payer
	lookupStarted, chargeStarted chan struct{}
	lookupGo, chargeGo           chan struct{}
}

func (p *gatedPayer) FindCharges(ctx context.Context, l order.Lookup) ([]order.Receipt, error) {
	close(p.lookupStarted)
	<-p.lookupGo
	return p.Payer.FindCharges(ctx, l)
}

func (p *gatedPayer) Charge(ctx context.Context, req order.ChargeRequest) (order.Receipt, error) {
	close(p.chargeStarted)
	<-p.chargeGo
	return p.Payer.Charge(ctx, req)
}

// TestGivingUpDoesNotFailAnOrderARetryIsCharging: the worker has given up
// on an order and asks the provider whether it holds a charge; meanwhile
// the client's retry resumes the order and charges it. The lookup answers
// "no charge" before that charge lands. The worker must not fail the order
// (invariant 7): the attempt the retry recorded after the worker loaded the
// order makes the lookup's answer stale, and the order is paid once.
func TestGivingUpDoesNotFailAnOrderARetryIsCharging(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	b.policy.GiveUpAfter = 1 // the first run of the job resolves by lookup
	id := b.pendingOrder(t, "pm_card_visa", nil)
	req := order.PlaceRequest{CustomerID: "cus_1", Currency: "USD", PaymentMethod: "pm_card_visa",
		Items: []order.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 1299}}}
	// The key of the request that placed the order, its lock long expired.
	if _, err := b.db.Exec(context.Background(), `INSERT INTO idempotency_keys (key, request_fingerprint, order_id, created_at)
		VALUES ('retry', $1, $2, now() - interval '1 hour')`, req.Fingerprint(), id); err != nil {
		t.Fatal(err)
	}
	gates := &gatedPayer{Payer: b.payer, lookupStarted: make(chan struct{}), chargeStarted: make(chan struct{}),
		lookupGo: make(chan struct{}), chargeGo: make(chan struct{})}
	inserter, err := river.NewClient(riverpgxv5.New(b.db), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc := order.NewService(b.db, gates, inserter, order.DefaultConfig(), slog.New(slog.DiscardHandler))

	b.start(t, gates)
	<-gates.lookupStarted // the worker loaded the order and asks the provider
	placed := make(chan order.Order, 1)
	go func() {
		p, err := svc.Place(context.Background(), "retry", req)
		if err != nil {
			t.Errorf("retry: %v", err)
		}
		placed <- p.Order
	}()
	<-gates.chargeStarted // the retry resumed the order and is charging it
	close(gates.lookupGo) // "no charge": the retry's charge has not landed
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if state, _ := b.job(t, id); state != "running" { // the worker acted on the lookup
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker did not act on the lookup")
		}
	}
	close(gates.chargeGo)

	if got := <-placed; got.Status != order.StatusPaid {
		t.Errorf("the retry answered %s (%s), want paid", got.Status, got.FailureReason)
	}
	if o := b.waitFor(t, id, 15*time.Second); o.Status != order.StatusPaid {
		t.Errorf("order = %s (%s), want paid: the provider holds its charge", o.Status, o.FailureReason)
	}
	if n := b.sim.Stats(t).ChargesByReference[id.String()]; n != 1 {
		t.Errorf("provider charges for the order = %d, want 1", n)
	}
}
