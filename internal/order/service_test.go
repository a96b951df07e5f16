package order_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// serviceBundle is the checkout flow on a fresh database, charging the
// simulator over HTTP through the real protected client.
type serviceBundle struct {
	db  *pgxpool.Pool
	sim *simtest.Server
	svc *order.Service
}

func setupService(t *testing.T, cfg order.Config) *serviceBundle {
	t.Helper()
	b := &serviceBundle{db: dbtest.Pool(t), sim: simtest.Start(t, 0)}
	log := slog.New(slog.DiscardHandler)
	client, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: b.sim.URL, SecretKey: "sk_test_checkout"}, resilience.DefaultConfig(), nil, log)
	if err != nil {
		t.Fatal(err)
	}
	b.svc = serviceOn(t, b.db, orderpayment.New(client), cfg)
	return b
}

// serviceOn is the checkout flow on db, charging through payer.
func serviceOn(t *testing.T, db *pgxpool.Pool, payer order.Payer, cfg order.Config) *order.Service {
	t.Helper()
	jobs, err := river.NewClient(riverpgxv5.New(db), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return order.NewService(db, payer, jobs, cfg, slog.New(slog.DiscardHandler))
}

func placeRequest(paymentMethod string) order.PlaceRequest {
	return order.PlaceRequest{CustomerID: "cus_1", Currency: "USD", PaymentMethod: paymentMethod,
		Items: []order.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 1299}}}
}

func (b *serviceBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPlaceChargesAndReplaysTheSameAnswer(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	ctx := context.Background()

	first, err := b.svc.Place(ctx, "k-1", placeRequest("pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	o := first.Order
	if o.Status != order.StatusPaid || o.ChargeID == "" || o.Total != 2598 || first.Replayed {
		t.Fatalf("Place = %+v, want a new paid order of 2598 with a charge", first)
	}
	if got := b.count(t, `SELECT count(*) FROM river_job`); got != 0 {
		t.Errorf("river jobs = %d, want 0: a paid order never needs one", got)
	}

	again, err := b.svc.Place(ctx, "k-1", placeRequest("pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || fmt.Sprint(again.Order) != fmt.Sprint(o) {
		t.Errorf("replay = %+v\nwant the first answer %+v, replayed", again, first)
	}
	if got := b.sim.Stats(t).TotalCharges; got != 1 {
		t.Errorf("provider charges = %d, want 1", got)
	}

	_, err = b.svc.Place(ctx, "k-1", placeRequest("pm_card_mastercard"))
	if !errors.Is(err, order.ErrKeyReused) {
		t.Errorf("same key, other body: %v, want ErrKeyReused", err)
	}
}

func TestPlaceDeclinedOrderIsFailedAndNotRetried(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	placed, err := b.svc.Place(context.Background(), "k-decline", placeRequest("pm_card_chargeDeclined"))
	if err != nil {
		t.Fatal(err)
	}
	if o := placed.Order; o.Status != order.StatusPaymentFailed || o.FailureReason != order.ReasonCardDeclined {
		t.Errorf("order = %s (%s), want payment_failed (card_declined)", o.Status, o.FailureReason)
	}
}

// TestPlacePendingPaymentIsDeferred: a card asking for 3-D Secure leaves the
// PaymentIntent requires_action, neither paid nor failed: the order is
// deferred as pending_payment (202) with its job, which settles it from the
// lookup once the provider has an outcome — never payment_failed.
func TestPlacePendingPaymentIsDeferred(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	placed, err := b.svc.Place(context.Background(), "k-3ds", placeRequest("pm_card_authenticationRequired"))
	if err != nil {
		t.Fatal(err)
	}
	if o := placed.Order; o.Status != order.StatusPendingPayment {
		t.Errorf("order = %s (%s), want pending_payment", o.Status, o.FailureReason)
	}
	n := b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'charge_order' AND args->>'order_id' = $1 AND state = 'scheduled'`,
		placed.Order.ID.String())
	if n != 1 {
		t.Errorf("scheduled charge jobs for the order = %d, want 1", n)
	}
}

// TestPlaceDefersWithItsJobWhenTheProviderIsDown: the 202's promise — the
// worker will charge it — is kept by a job written with the deferral.
func TestPlaceDefersWithItsJobWhenTheProviderIsDown(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	b.sim.Fault(t, `{"down":true}`)
	placed, err := b.svc.Place(context.Background(), "k-down", placeRequest("pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if placed.Order.Status != order.StatusPendingPayment || placed.RetryAfter <= 0 {
		t.Errorf("Place = %+v, want pending_payment with a polling hint", placed)
	}
	n := b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'charge_order' AND args->>'order_id' = $1 AND state = 'scheduled'`,
		placed.Order.ID.String())
	if n != 1 {
		t.Errorf("scheduled charge jobs for the order = %d, want 1", n)
	}
	// The replay stays a 202 after the worker paid the order.
	if _, _, err := order.Settle(context.Background(), b.db, placed.Order, order.Settlement{Status: order.StatusPaid, ChargeID: "ch_worker"}); err != nil {
		t.Fatal(err)
	}
	again, err := b.svc.Place(context.Background(), "k-down", placeRequest("pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Order.Status != order.StatusPendingPayment || again.Order.ChargeID != "" || !again.Order.UpdatedAt.Equal(placed.Order.UpdatedAt) {
		t.Errorf("replay = %+v, want the first answer (pending_payment at %v) although the order is paid now", again.Order, placed.Order.UpdatedAt)
	}
	if got, err := order.Get(context.Background(), b.db, placed.Order.ID); err != nil || got.Status != order.StatusPaid {
		t.Errorf("order now = %s, %v; want paid", got.Status, err)
	}
}

func TestPlaceOneKeyOneOrderUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	const n = 20
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		inUse   int
		unknown []error
	)
	for range n {
		wg.Go(func() {
			placed, err := b.svc.Place(context.Background(), "k-race", placeRequest("pm_card_visa"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ids[placed.Order.ID.String()]++
			case errors.Is(err, order.ErrKeyInUse):
				inUse++
			default:
				unknown = append(unknown, err)
			}
		})
	}
	wg.Wait()
	if len(unknown) > 0 {
		t.Fatalf("unexpected errors: %v", unknown)
	}
	if len(ids) != 1 || b.count(t, `SELECT count(*) FROM orders`) != 1 {
		t.Errorf("orders answered %v (%d in use), stored %d; want exactly one", ids, inUse, b.count(t, `SELECT count(*) FROM orders`))
	}
	if got := b.sim.Stats(t).TotalCharges; got != 1 {
		t.Errorf("provider charges = %d, want 1", got)
	}
}

// TestPlaceResumesAKeyWhoseRequestDied: once the lock of a request that
// never answered expires, a retry takes its order over.
func TestPlaceResumesAKeyWhoseRequestDied(t *testing.T) {
	t.Parallel()
	b := setupService(t, order.DefaultConfig())
	ctx := context.Background()
	// A request that dies after its first write: the key is held, the
	// order pending, no answer stored.
	if _, err := b.db.Exec(ctx, `
		WITH k AS (INSERT INTO idempotency_keys (key, request_fingerprint, order_id, locked_until)
		           VALUES ('k-died', $1, '018f0000-0000-7000-8000-000000000001', now() + interval '1 hour'))
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total)
		VALUES ('018f0000-0000-7000-8000-000000000001', 'pending', 'cus_1', 'USD', 'pm_card_visa',
		        '[{"sku":"SKU-1","quantity":2,"unit_price":1299}]', 2598)`, placeRequest("pm_card_visa").Fingerprint()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Place(ctx, "k-died", placeRequest("pm_card_visa")); !errors.Is(err, order.ErrKeyInUse) {
		t.Fatalf("retry while the lock holds = %v, want ErrKeyInUse", err)
	}
	if _, err := b.db.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	placed, err := b.svc.Place(ctx, "k-died", placeRequest("pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if placed.Order.ID.String() != "018f0000-0000-7000-8000-000000000001" || placed.Order.Status != order.StatusPaid {
		t.Errorf("resumed = %s %s, want the dead request's order, paid", placed.Order.ID, placed.Order.Status)
	}
	if got := b.count(t, `SELECT count(*) FROM orders`); got != 1 {
		t.Errorf("orders = %d, want 1", got)
	}
}

// TestPlaceDoesNotChargeAnOrderPastTheKeyRetention: a resumed order older
// than the provider's key retention allows is deferred to the worker (which
// resolves it by lookup), never charged by the API.
func TestPlaceDoesNotChargeAnOrderPastTheKeyRetention(t *testing.T) {
	t.Parallel()
	cfg := order.DefaultConfig()
	cfg.KeyRetention = time.Hour
	b := setupService(t, cfg)
	ctx := context.Background()
	if _, err := b.db.Exec(ctx, `
		WITH k AS (INSERT INTO idempotency_keys (key, request_fingerprint, order_id, locked_until)
		           VALUES ('k-old', $1, '018f0000-0000-7000-8000-000000000002', now() - interval '1 second'))
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total, created_at)
		VALUES ('018f0000-0000-7000-8000-000000000002', 'pending', 'cus_1', 'USD', 'pm_card_visa',
		        '[{"sku":"SKU-1","quantity":2,"unit_price":1299}]', 2598, now() - interval '2 hours')`,
		placeRequest("pm_card_visa").Fingerprint()); err != nil {
		t.Fatal(err)
	}
	placed, err := b.svc.Place(ctx, "k-old", placeRequest("pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if placed.Order.Status != order.StatusPendingPayment {
		t.Errorf("order = %s, want pending_payment (deferred to the worker's lookup)", placed.Order.Status)
	}
	if got := b.sim.Stats(t).TotalCharges; got != 0 {
		t.Errorf("provider charges = %d, want 0", got)
	}
}

func TestMayCharge(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	o := order.Order{CreatedAt: created}
	for _, tt := range []struct {
		age  time.Duration
		want bool
	}{{0, true}, {21 * time.Hour, true}, {21*time.Hour + 36*time.Minute - time.Nanosecond, true}, {21*time.Hour + 36*time.Minute, false}, {30 * time.Hour, false}} {
		if got := order.MayCharge(o, 24*time.Hour, created.Add(tt.age)); got != tt.want {
			t.Errorf("MayCharge(order %v old, 24h retention) = %v, want %v", tt.age, got, tt.want)
		}
	}
}

// TestPlaceDefersAThrottledChargeUntilRetryAfter: a provider over its rate
// limit (429 + Retry-After) charged nothing and is not failing. The order
// is deferred (202) with its job due after the provider's Retry-After, not
// after the breaker's half second; the call is not retried into the same
// limit, and the breaker stays closed.
func TestPlaceDefersAThrottledChargeUntilRetryAfter(t *testing.T) {
	t.Parallel()
	b := &serviceBundle{db: dbtest.Pool(t), sim: simtest.StartConfig(t, paymentsim.Config{RateLimit: 1})}
	client, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: b.sim.URL, SecretKey: "sk_test_checkout"}, resilience.DefaultConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	b.svc = serviceOn(t, b.db, orderpayment.New(client), order.DefaultConfig())
	ctx := context.Background()

	if first, err := b.svc.Place(ctx, "k-first", placeRequest("pm_card_visa")); err != nil || first.Order.Status != order.StatusPaid {
		t.Fatalf("first order: %+v, %v; want paid with the bucket's one token", first.Order, err)
	}
	placed, err := b.svc.Place(ctx, "k-throttled", placeRequest("pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if placed.Order.Status != order.StatusPendingPayment || placed.RetryAfter < time.Second {
		t.Errorf("Place = %s, polling hint %v; want pending_payment, at least the provider's Retry-After of 1s", placed.Order.Status, placed.RetryAfter)
	}
	var due time.Duration
	err = b.db.QueryRow(ctx, `SELECT extract(epoch FROM scheduled_at - $2::timestamptz) * interval '1 second' FROM river_job
		WHERE kind = 'charge_order' AND args->>'order_id' = $1 AND state = 'scheduled'`,
		placed.Order.ID.String(), placed.Order.UpdatedAt).Scan(&due)
	if err != nil {
		t.Fatalf("the deferred order's scheduled job: %v", err)
	}
	if due < time.Second {
		t.Errorf("job due %v after the deferral, want at least the provider's Retry-After of 1s", due)
	}
	if st := b.sim.Stats(t); st.RateLimited != 1 || st.TotalCharges != 1 {
		t.Errorf("provider: %d answered 429, %d charged; want 1 and 1 (no retry into the limit)", st.RateLimited, st.TotalCharges)
	}
	if got := client.Policy().State(); got != resilience.StateClosed {
		t.Errorf("breaker %v, want closed: a 429 is no provider failure", got)
	}
}
