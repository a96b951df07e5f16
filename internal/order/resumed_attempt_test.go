package order_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/worker"
)

// heldCharge is the provider while a charge is in flight: Charge reports it
// began, waits for release, then charges for real.
type heldCharge struct {
	order.Payer
	began, release chan struct{}
}

func (h heldCharge) Charge(ctx context.Context, req order.ChargeRequest) (order.Receipt, error) {
	close(h.began)
	<-h.release
	return h.Payer.Charge(context.WithoutCancel(ctx), req)
}

// TestResumedRequestRecordsItsAttempt (found by the chaos soak): a request
// resuming a key whose first request died charges the order again. Unless
// it records that attempt (order.MarkAttempt), last_attempt_at still says
// the order's creation, the worker's guard before trusting a lookup's "no
// charge" — LookupAfter past last_attempt_at — lets the lookup through
// while the API's charge is in flight, and the order is failed while the
// charge lands after (docs/design.md, "Invariants").
func TestResumedRequestRecordsItsAttempt(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	ctx := context.Background()
	const id = "018f0000-0000-7000-8000-0000000000aa"
	// A request that died an hour ago after its first write, its lock long
	// expired; the worker has been trying the order since (give-up reached).
	if _, err := b.db.Exec(ctx, `
		WITH k AS (INSERT INTO idempotency_keys (key, request_fingerprint, order_id, locked_until)
		           VALUES ('k-resumed', $1, $2, now() - interval '1 hour'))
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total, created_at, updated_at, last_attempt_at)
		VALUES ($2, 'pending', 'cus_1', 'USD', 'pm_card_visa', '[{"sku":"SKU-1","quantity":2,"unit_price":1299}]', 2598,
		        now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour')`,
		placeRequest("pm_card_visa").Fingerprint(), id); err != nil {
		t.Fatal(err)
	}
	client, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: b.sim.URL, SecretKey: "sk_test_checkout"}, resilience.DefaultConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	real := orderpayment.New(client)
	held := heldCharge{Payer: real, began: make(chan struct{}), release: make(chan struct{})}
	jobs, err := river.NewClient(riverpgxv5.New(b.db), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := order.DefaultConfig()
	cfg.PaymentBudget = time.Minute // the held charge must not time out
	svc := order.NewService(b.db, held, jobs, cfg, slog.New(slog.DiscardHandler))

	// The client retries with its key: the request resumes and charges.
	placed := make(chan error, 1)
	go func() {
		_, err := svc.Place(ctx, "k-resumed", placeRequest("pm_card_visa"))
		placed <- err
	}()
	<-held.began

	// What the worker sees now, resolving the order (ChargeWorker.resolve).
	o := getOrder(t, b, id)
	lookupAfter := worker.DefaultChargePolicy().LookupAfter
	if wait := time.Until(o.LastAttemptAt.Add(lookupAfter)); wait <= 0 {
		t.Errorf("with the API's charge in flight, last_attempt_at = %v (%v ago): the worker would trust a lookup now, "+
			"want it to wait LookupAfter (%v) from the attempt's start", o.LastAttemptAt, time.Since(o.LastAttemptAt).Round(time.Second), lookupAfter)
		// The worker's resolve, as it would run: lookup, then settle.
		to, err := order.Resolve(ctx, real, o, lookupAfter)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := order.Settle(ctx, b.db, o, to); err != nil {
			t.Fatal(err)
		}
	}
	close(held.release)
	if err := <-placed; err != nil {
		t.Fatal(err)
	}
	o = getOrder(t, b, id)
	if charges := b.sim.Stats(t).ChargesByReference[id]; o.Status == order.StatusPaymentFailed && charges > 0 {
		t.Errorf("order %s is payment_failed (%s) while the provider holds %d charge for it (invariant 7)", id, o.FailureReason, charges)
	}
}

func getOrder(t *testing.T, b *serviceBundle, id string) order.Order {
	t.Helper()
	o, err := order.Get(context.Background(), b.db, uuid.MustParse(id))
	if err != nil {
		t.Fatal(err)
	}
	return o
}
