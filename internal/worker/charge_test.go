package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// workerBundle is a real River worker on a fresh database, charging through
// the real protected client against the simulator over HTTP.
type workerBundle struct {
	db      *pgxpool.Pool
	sim     *simtest.Server
	reg     *prometheus.Registry
	metrics *Metrics
	sweeper *Sweeper
	payer   order.Payer
	policy  ChargePolicy
}

func setupWorker(t *testing.T) *workerBundle {
	t.Helper()
	b := &workerBundle{db: dbtest.Pool(t), sim: simtest.Start(t, 0), reg: prometheus.NewRegistry()}
	var err error
	if b.metrics, err = NewMetrics(b.reg, b.db); err != nil {
		t.Fatal(err)
	}
	sch := DefaultSchedule()
	sch.SweepAfter, sch.ReconcileAfter = time.Second, time.Second
	if b.sweeper, err = NewSweeper(b.db, sch, b.reg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	b.policy = DefaultChargePolicy()
	b.policy.LookupAfter = 500 * time.Millisecond // the simulator finishes a charge at once
	cfg := resilience.DefaultConfig()
	cfg.MaxAttempts = 1 // as in cmd/worker: River does the retrying
	b.payer = newPayer(t, b.sim.URL, cfg)
	return b
}

// newPayer is the worker's protected payment client, as cmd/worker wires it.
func newPayer(t *testing.T, url string, cfg resilience.Config) order.Payer {
	t.Helper()
	client, err := payment.NewProtectedClient("payment-worker", payment.Config{BaseURL: url, SecretKey: "sk_test_checkout"}, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return orderpayment.New(client)
}

// start runs a River client with the charge worker until the test ends;
// periodic lists extra periodic jobs, whose workers setup registers.
func (b *workerBundle) start(t *testing.T, payer order.Payer, periodic ...*river.PeriodicJob) {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, NewChargeWorker(b.db, payer, b.policy, b.metrics, slog.New(slog.DiscardHandler)))
	river.AddWorker(workers, b.sweeper)
	client, err := river.NewClient(riverpgxv5.New(b.db), &river.Config{
		Queues:            map[string]river.QueueConfig{order.QueuePayments: {MaxWorkers: 4}, river.QueueDefault: {MaxWorkers: 1}},
		Workers:           workers,
		PeriodicJobs:      periodic,
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 100 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.StopAndCancel(ctx)
	})
}

// pendingOrder saves an order the way the API's fallback leaves it:
// pending_payment, with its charge job due now. It was placed, and its
// last charge attempt made, an hour ago.
func (b *workerBundle) pendingOrder(t *testing.T, paymentMethod string, jobOpts *river.InsertOpts) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	o := order.Order{
		ID: uuid.New(), Status: order.StatusPendingPayment, CustomerID: "cus_1", Currency: "USD",
		PaymentMethod: paymentMethod, Items: []order.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 1299}}, Total: 2598,
	}
	inserter, err := river.NewClient(riverpgxv5.New(b.db), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total,
			                    created_at, updated_at, last_attempt_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour')`,
			o.ID, o.Status, o.CustomerID, o.Currency, o.PaymentMethod, o.Items, o.Total); err != nil {
			return err
		}
		_, err := inserter.InsertTx(ctx, tx, order.ChargeArgs{OrderID: o.ID}, jobOpts)
		return err
	})
	if err != nil {
		t.Fatalf("save pending order: %v", err)
	}
	return o.ID
}

// waitFor polls the database (state this test does not own: a River
// worker changes it) until the order is terminal.
func (b *workerBundle) waitFor(t *testing.T, id uuid.UUID, within time.Duration) order.Order {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		o, err := order.Get(context.Background(), b.db, id)
		if err != nil {
			t.Fatalf("load order: %v", err)
		}
		if o.Status.Terminal() {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s still %s after %v", id, o.Status, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *workerBundle) job(t *testing.T, id uuid.UUID) (state string, attempt int) {
	t.Helper()
	err := b.db.QueryRow(context.Background(),
		`SELECT state, attempt FROM river_job WHERE kind = 'charge_order' AND args->>'order_id' = $1`, id.String()).
		Scan(&state, &attempt)
	if err != nil {
		t.Fatalf("load job of order %s: %v", id, err)
	}
	return state, attempt
}

func TestWorkerChargesPendingOrderOnce(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	id := b.pendingOrder(t, "pm_card_visa", nil)
	b.start(t, b.payer)

	o := b.waitFor(t, id, 10*time.Second)
	if o.Status != order.StatusPaid || o.ChargeID == "" {
		t.Errorf("order = %s with charge %q, want paid with a charge id", o.Status, o.ChargeID)
	}
	if state, _ := b.job(t, id); state != "completed" {
		t.Errorf("job state = %s, want completed (in the order's settling transaction)", state)
	}
	if got, want := b.sim.Stats(t).ChargesByReference[id.String()], 1; got != want {
		t.Errorf("provider charges = %d, want %d", got, want)
	}
}

func TestWorkerDeclineFailsOrderWithoutRetry(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	id := b.pendingOrder(t, "pm_card_chargeDeclined", nil)
	b.start(t, b.payer)

	o := b.waitFor(t, id, 10*time.Second)
	if o.Status != order.StatusPaymentFailed || o.FailureReason != order.ReasonCardDeclined {
		t.Errorf("order = %s (%s), want payment_failed (card_declined)", o.Status, o.FailureReason)
	}
	if state, attempt := b.job(t, id); state != "completed" || attempt != 1 {
		t.Errorf("job = %s after %d attempts, want completed after 1", state, attempt)
	}
	if got := b.sim.Stats(t).TotalCharges; got != 0 {
		t.Errorf("provider charges = %d, want 0", got)
	}
}

func TestWorkerCompletesJobOfSettledOrder(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	id := b.pendingOrder(t, "pm_card_visa", nil)
	// The API settled the order before the worker got to it.
	o, err := order.Get(context.Background(), b.db, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := order.Settle(context.Background(), b.db, o, order.Settlement{Status: order.StatusPaid, ChargeID: "ch_api"}); err != nil {
		t.Fatal(err)
	}
	b.start(t, b.payer)

	deadline := time.Now().Add(10 * time.Second)
	for state, _ := b.job(t, id); state != "completed"; state, _ = b.job(t, id) {
		if time.Now().After(deadline) {
			t.Fatalf("job state = %s, want completed", state)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := b.sim.Stats(t).TotalCharges; got != 0 {
		t.Errorf("provider charges = %d, want 0 for an order that was already paid", got)
	}
	if o, _ := order.Get(context.Background(), b.db, id); o.ChargeID != "ch_api" {
		t.Errorf("charge id = %q, want the API's ch_api untouched", o.ChargeID)
	}
}

// crashAfterCharge charges for real, then fails the first call as if the
// worker died after the provider recorded the charge and before the
// database commit.
type crashAfterCharge struct {
	order.Payer
	calls    atomic.Int32
	replayed atomic.Bool
}

func (c *crashAfterCharge) Charge(ctx context.Context, req order.ChargeRequest) (order.Receipt, error) {
	receipt, err := c.Payer.Charge(ctx, req)
	if c.calls.Add(1) == 1 && err == nil {
		return order.Receipt{}, fmt.Errorf("worker killed before commit: %w", context.Canceled)
	}
	c.replayed.Store(receipt.Replayed)
	return receipt, err
}

func TestWorkerKilledAfterChargeIsRetriedAndSettledByReplay(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	id := b.pendingOrder(t, "pm_card_visa", nil)
	payer := &crashAfterCharge{Payer: b.payer}
	b.start(t, payer)

	// River retries after NextRetry (~1 s) once its scheduler runs (every 5 s).
	o := b.waitFor(t, id, 20*time.Second)
	if o.Status != order.StatusPaid {
		t.Fatalf("order = %s, want paid", o.Status)
	}
	if got := payer.calls.Load(); got != 2 {
		t.Errorf("charge calls = %d, want 2 (the crashed one and the retry)", got)
	}
	if !payer.replayed.Load() {
		t.Error("the retry was not a provider replay: the idempotency key changed between attempts")
	}
	if got, want := b.sim.Stats(t).ChargesByReference[id.String()], 1; got != want {
		t.Errorf("provider charges = %d, want %d", got, want)
	}
}

func TestWorkerSnoozesWhileBreakerOpen(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	b.sim.Fault(t, `{"down":true}`)
	const n = 14
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = b.pendingOrder(t, "pm_card_visa", nil)
	}
	b.start(t, b.payer)

	// Ten failed calls fill the window and open the breaker; later jobs
	// must snooze (no attempt used) instead of failing.
	deadline := time.Now().Add(15 * time.Second)
	for testutil.ToFloat64(b.metrics.jobs.WithLabelValues(jobSnoozed)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no job snoozed; breaker state %v", b.payer.RetryAfter())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var discarded int
	if err := b.db.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE state = 'discarded'`).Scan(&discarded); err != nil {
		t.Fatal(err)
	}
	if discarded != 0 {
		t.Errorf("%d jobs discarded during the outage, want 0", discarded)
	}

	b.sim.Reset(t) // measure in-flight during the drain only
	b.sim.Heal(t)
	for _, id := range ids {
		if o := b.waitFor(t, id, 30*time.Second); o.Status != order.StatusPaid {
			t.Errorf("order %s = %s after the provider recovered, want paid", id, o.Status)
		}
	}
	st := b.sim.Stats(t)
	if st.DuplicateReferences != 0 || st.TotalCharges != n {
		t.Errorf("provider: %d charges, %d references charged twice; want %d and 0", st.TotalCharges, st.DuplicateReferences, n)
	}
	// The outage halved the limit to its minimum; it grows a slot per healthy
	// call, so a drain of 14 charges never takes it past where it started.
	if limit := resilience.DefaultConfig().LimitInitial; st.MaxInFlight > limit {
		t.Errorf("provider max in-flight during drain = %d, want ≤ the limit's initial %d", st.MaxInFlight, limit)
	}
}

// chargesRefused stands in for a provider that refuses every charge
// connection (a dial error: certainly not charged) while its lookup still
// answers, as a provider's read path often survives its write path.
type chargesRefused struct{ order.Payer }

func (chargesRefused) Charge(context.Context, order.ChargeRequest) (order.Receipt, error) {
	return order.Receipt{}, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// TestWorkerFailsOrderOnlyWhenTheProviderHoldsNoCharge: giving up fails the
// order only after the lookup says the provider holds nothing for it.
func TestWorkerFailsOrderOnlyWhenTheProviderHoldsNoCharge(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	b.policy.GiveUpAfter = 2
	id := b.pendingOrder(t, "pm_card_visa", nil)
	b.start(t, chargesRefused{b.payer})

	o := b.waitFor(t, id, 20*time.Second)
	if o.Status != order.StatusPaymentFailed || o.FailureReason != order.ReasonProviderUnavailable {
		t.Errorf("order = %s (%s), want payment_failed (provider_unavailable)", o.Status, o.FailureReason)
	}
	if got := testutil.ToFloat64(b.metrics.failed.WithLabelValues(order.ReasonProviderUnavailable)); got != 1 {
		t.Errorf("checkout_orders_failed_total{reason=provider_unavailable} = %v, want 1", got)
	}
	if state, attempt := b.job(t, id); state != "completed" || attempt != 2 {
		t.Errorf("job = %s after %d attempts, want completed after 2 (one charge, one lookup)", state, attempt)
	}
}

// TestWorkerSettlesFromTheLookupAnOrderTheProviderCharged: the API's own
// attempt charged but lost the answer, and every later attempt failed with
// a dial error, which looks certain. A give-up rule that looked at the last
// attempt only would fail a charged order; the worker settles it from the
// lookup.
func TestWorkerSettlesFromTheLookupAnOrderTheProviderCharged(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	b.policy.GiveUpAfter = 2
	id := b.pendingOrder(t, "pm_card_visa", nil)
	b.sim.Fault(t, `{"reset_after_charge":true}`)
	o, err := order.Get(context.Background(), b.db, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := order.Charge(context.Background(), b.payer, o); err == nil {
		t.Fatal("charge with the answer lost succeeded, want an ambiguous error")
	}
	b.sim.Heal(t)
	b.start(t, chargesRefused{b.payer})

	o = b.waitFor(t, id, 20*time.Second)
	if o.Status != order.StatusPaid || o.ChargeID == "" {
		t.Errorf("order = %s (%s), want paid with the provider's charge: the provider holds one", o.Status, o.FailureReason)
	}
	if got := b.sim.Stats(t).ChargesByReference[id.String()]; got != 1 {
		t.Errorf("provider charges = %d, want 1", got)
	}
	if got := testutil.ToFloat64(b.metrics.jobs.WithLabelValues(jobResolved)); got != 1 {
		t.Errorf("resolved jobs = %v, want 1", got)
	}
}

// TestWorkerNeverChargesUnderAForgottenKey: the provider forgot the order's key (a ledger of 3 keys), so a retry would be
// a second charge. Past the key retention the worker looks up instead.
func TestWorkerNeverChargesUnderAForgottenKey(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	b.sim = simtest.StartConfig(t, paymentsim.Config{LedgerCap: 3})
	var err error
	b.payer = newPayer(t, b.sim.URL, resilience.DefaultConfig())
	b.policy.KeyRetention = time.Second // every order below is older than that
	id := b.pendingOrder(t, "pm_card_visa", nil)
	o, err := order.Get(context.Background(), b.db, id)
	if err != nil {
		t.Fatal(err)
	}
	b.sim.Fault(t, `{"reset_after_charge":true}`)
	// An attempt is recorded before it is sent, as the API and the worker
	// record theirs: the lookup reads the window around the attempts.
	if _, err := order.MarkAttempt(context.Background(), b.db, id); err != nil {
		t.Fatal(err)
	}
	_, _, _ = order.Charge(context.Background(), b.payer, o) // charged, answer lost
	b.sim.Heal(t)
	for i := range 3 { // three other orders push its key out of the ledger
		other := o
		other.ID = uuid.New()
		if _, _, err := order.Charge(context.Background(), b.payer, other); err != nil {
			t.Fatalf("charge other order %d: %v", i, err)
		}
	}
	b.start(t, b.payer)

	if o := b.waitFor(t, id, 20*time.Second); o.Status != order.StatusPaid {
		t.Errorf("order = %s, want paid from the lookup", o.Status)
	}
	st := b.sim.Stats(t)
	if got := st.ChargesByReference[id.String()]; got != 1 {
		t.Errorf("provider charges for the order = %d, want 1 (never re-charged under a forgotten key)", got)
	}
	if st.DuplicateReferences != 0 {
		t.Errorf("duplicate references = %d, want 0", st.DuplicateReferences)
	}
}

// TestWorkerKeepsAnUnresolvedOrderOpen: past giving up, while the lookup
// fails too, the order stays unsettled and its job alive.
func TestWorkerKeepsAnUnresolvedOrderOpen(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	b.policy.GiveUpAfter = 1
	b.sim.Fault(t, `{"down":true}`)
	id := b.pendingOrder(t, "pm_card_visa", nil)
	b.start(t, b.payer)

	waitForJobState(t, b, id, "scheduled")
	if o, _ := order.Get(context.Background(), b.db, id); o.Status != order.StatusPendingPayment {
		t.Errorf("order = %s, want still pending_payment: the provider may hold its charge", o.Status)
	}
	if got := testutil.ToFloat64(b.metrics.jobs.WithLabelValues(jobUnresolved)); got != 1 {
		t.Errorf("unresolved jobs = %v, want 1", got)
	}
	if got := b.sim.Stats(t).TotalCharges; got != 0 {
		t.Errorf("provider charges = %d, want 0: past giving up the worker only looks up", got)
	}
}

// TestWorkerDatabaseFailureAfterGivingUpKeepsTheJob: an error past giving
// up must not go back to River, which would count it towards discarding
// the job of an unsettled order.
func TestWorkerDatabaseFailureAfterGivingUpKeepsTheJob(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	b.policy.GiveUpAfter = 1
	id := b.pendingOrder(t, "pm_card_visa", &river.InsertOpts{MaxAttempts: 1})
	// The database refuses to settle orders, as during a failover.
	_, err := b.db.Exec(context.Background(), `
		CREATE FUNCTION refuse_settle() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'read-only for the test'; END $$;
		CREATE TRIGGER refuse_settle BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION refuse_settle();`)
	if err != nil {
		t.Fatal(err)
	}
	b.start(t, b.payer)

	waitForJobState(t, b, id, "scheduled")
	if got := testutil.ToFloat64(b.metrics.jobs.WithLabelValues(jobUnresolved)); got != 1 {
		t.Errorf("unresolved jobs = %v, want 1", got)
	}
}

// TestChargeJobsOutliveRiversRescuer: River's rescuer discards a job whose worker died during attempt max_attempts.
// The worker gives up by its own count, far below River's limit, so a
// rescued job is always retried.
func TestChargeJobsOutliveRiversRescuer(t *testing.T) {
	t.Parallel()
	got, limit := (order.ChargeArgs{}).InsertOpts().MaxAttempts, DefaultChargePolicy().GiveUpAfter
	if got <= 2*limit {
		t.Errorf("River max attempts = %d, want well above the worker's give-up (%d) so the rescuer never discards", got, limit)
	}
}

// TestSweepChargesOrdersWhoseRequestDiedAndRequeuesVanishedJobs: a pending
// order has no job until the sweep gives it one (checkout writes none on
// its happy path); a pending_payment order whose job was deleted behind the
// code's back (River UI, a restore) gets a new one.
func TestSweepChargesOrdersWhoseRequestDiedAndRequeuesVanishedJobs(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	deferred := b.pendingOrder(t, "pm_card_visa", nil)
	died := uuid.New()
	if _, err := b.db.Exec(context.Background(), `
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total, updated_at)
		VALUES ($1, 'pending', 'cus_1', 'USD', 'pm_card_visa', '[{"sku":"SKU-1","quantity":1,"unit_price":500}]', 500,
		        now() - interval '1 hour')`, died); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(context.Background(), `DELETE FROM river_job WHERE kind = 'charge_order'`); err != nil {
		t.Fatal(err)
	}
	b.start(t, b.payer, PeriodicSweeps(DefaultSchedule())...) // each runs once at start

	for _, id := range []uuid.UUID{deferred, died} {
		if o := b.waitFor(t, id, 15*time.Second); o.Status != order.StatusPaid {
			t.Errorf("order %s = %s, want paid after the sweep gave it a job", id, o.Status)
		}
	}
	for _, status := range []string{"pending", "pending_payment"} {
		if got := testutil.ToFloat64(b.sweeper.requeued.WithLabelValues(status)); got != 1 {
			t.Errorf("checkout_orders_requeued_total{status=%q} = %v, want 1", status, got)
		}
	}
}

func waitForJobState(t *testing.T, b *workerBundle, id uuid.UUID, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for state, _ := b.job(t, id); state != want; state, _ = b.job(t, id) {
		if state == "discarded" || time.Now().After(deadline) {
			t.Fatalf("job of order %s is %s, want %s", id, state, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// blockingPayer holds every charge until its context ends, as a hung
// provider does.
type blockingPayer struct {
	order.Payer
	started chan struct{}
}

func (p blockingPayer) Charge(ctx context.Context, _ order.ChargeRequest) (order.Receipt, error) {
	p.started <- struct{}{}
	<-ctx.Done()
	return order.Receipt{}, ctx.Err()
}

// TestShutdownCancelledChargeIsAvailableAgainWithoutAnAttempt: a charge
// still running when the worker's shutdown timeout ends is cancelled
// (StopAndCancel). The job must be worked again at once by the next worker,
// neither spending an attempt nor recording an error — River (≥ 0.44) does
// exactly this for a job whose context its own stop cancelled.
func TestShutdownCancelledChargeIsAvailableAgainWithoutAnAttempt(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	id := b.pendingOrder(t, "pm_card_visa", nil)
	payer := blockingPayer{Payer: b.payer, started: make(chan struct{}, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, NewChargeWorker(b.db, payer, b.policy, b.metrics, slog.New(slog.DiscardHandler)))
	client, err := river.NewClient(riverpgxv5.New(b.db), &river.Config{
		Queues:            map[string]river.QueueConfig{order.QueuePayments: {MaxWorkers: 1}},
		Workers:           workers,
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 100 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-payer.started:
	case <-time.After(15 * time.Second):
		t.Fatal("the charge never started")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.StopAndCancel(ctx); err != nil {
		t.Fatal(err)
	}

	var (
		state   string
		attempt int
		nErrors int
	)
	if err := b.db.QueryRow(context.Background(), `
		SELECT state, attempt, coalesce(array_length(errors, 1), 0) FROM river_job
		WHERE kind = 'charge_order' AND args->>'order_id' = $1`, id.String()).Scan(&state, &attempt, &nErrors); err != nil {
		t.Fatal(err)
	}
	if state != "available" || attempt != 0 || nErrors != 0 {
		t.Errorf("job after the cancelled run: %s, attempt %d, %d errors; want available, attempt 0, no error", state, attempt, nErrors)
	}
	if got := testutil.ToFloat64(b.metrics.jobs.WithLabelValues(jobInterrupted)); got != 1 {
		t.Errorf("interrupted runs = %v, want 1", got)
	}
}

// inProgressFirst answers the first n charges as the provider does while an
// earlier attempt under the same key is still being processed (409), then
// charges for real.
type inProgressFirst struct {
	order.Payer
	n     int32
	calls atomic.Int32
}

func (p *inProgressFirst) Charge(ctx context.Context, req order.ChargeRequest) (order.Receipt, error) {
	if p.calls.Add(1) <= p.n {
		return order.Receipt{}, fmt.Errorf("%w: status 409", order.ErrInProgress)
	}
	return p.Payer.Charge(ctx, req)
}

// TestWorkerWaitsForAnAttemptStillInProgress: an order whose API attempt is
// still held by the provider (a hang it gave up on) is asked about again
// within a second or so, not on the retry schedule, and the waiting uses
// no attempt.
func TestWorkerWaitsForAnAttemptStillInProgress(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	id := b.pendingOrder(t, "pm_card_visa", nil)
	payer := &inProgressFirst{Payer: b.payer, n: 3}
	b.start(t, payer)
	if o := b.waitFor(t, id, 20*time.Second); o.Status != order.StatusPaid {
		t.Fatalf("order = %s, want paid", o.Status)
	}
	if got := payer.calls.Load(); got != 4 {
		t.Errorf("charge calls = %d, want 4 (three answered in progress, then the charge)", got)
	}
	if _, attempt := b.job(t, id); attempt != 1 {
		t.Errorf("job attempt = %d, want 1: waiting for an attempt in progress must not use attempts", attempt)
	}
}

// callTimes records when each order's charges were sent and what they met;
// calls the client refused without sending are not recorded.
type callTimes struct {
	order.Payer
	mu    sync.Mutex
	calls map[string][]chargeCall
}

type chargeCall struct {
	at        time.Time
	throttled time.Duration // the Retry-After of a 429; 0 for any other answer
}

func (p *callTimes) Charge(ctx context.Context, req order.ChargeRequest) (order.Receipt, error) {
	at := time.Now()
	r, err := p.Payer.Charge(ctx, req)
	if errors.Is(err, order.ErrRefused) { // not sent
		return r, err
	}
	wait, _ := order.RetryAfterOf(err)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[req.Reference] = append(p.calls[req.Reference], chargeCall{at: at, throttled: wait})
	return r, err
}

// TestWorkerSnoozesAThrottledChargeForRetryAfter: a provider over its rate
// limit answers 429 + Retry-After. A throttled job snoozes for the
// Retry-After — its next charge comes no sooner — using no attempt, and its
// order is charged later, once.
func TestWorkerSnoozesAThrottledChargeForRetryAfter(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	b.sim = simtest.StartConfig(t, paymentsim.Config{RateLimit: 1})
	cfg := resilience.DefaultConfig()
	cfg.MaxAttempts = 1
	b.payer = newPayer(t, b.sim.URL, cfg)
	const n = 3
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = b.pendingOrder(t, "pm_card_visa", nil)
	}
	payer := &callTimes{Payer: b.payer, calls: map[string][]chargeCall{}}
	b.start(t, payer)

	for _, id := range ids {
		if o := b.waitFor(t, id, 20*time.Second); o.Status != order.StatusPaid {
			t.Errorf("order %s = %s, want paid", id, o.Status)
		}
		if _, attempt := b.job(t, id); attempt != 1 {
			t.Errorf("order %s: job attempt = %d, want 1: waiting out a 429 uses no attempt", id, attempt)
		}
	}
	st := b.sim.Stats(t)
	if st.RateLimited == 0 {
		t.Fatal("the provider answered no 429: the test limited nothing")
	}
	if st.TotalCharges != n || st.DuplicateReferences != 0 {
		t.Errorf("provider: %d charges, %d references charged twice; want %d and 0", st.TotalCharges, st.DuplicateReferences, n)
	}
	payer.mu.Lock()
	defer payer.mu.Unlock()
	for ref, calls := range payer.calls {
		for i, c := range calls[:len(calls)-1] {
			if c.throttled == 0 {
				t.Errorf("order %s, call %d: not throttled, yet followed by another", ref, i)
			}
			if gap := calls[i+1].at.Sub(c.at); gap < c.throttled {
				t.Errorf("order %s: charged again %v after a 429 asking for %v", ref, gap, c.throttled)
			}
		}
	}
	if got := testutil.ToFloat64(b.metrics.jobs.WithLabelValues(jobSnoozed)); got == 0 {
		t.Error("no job snoozed")
	}
}

// countingPayer counts the lookups it is asked for.
type countingPayer struct {
	order.Payer
	lookups atomic.Int32
}

func (p *countingPayer) FindCharges(ctx context.Context, l order.Lookup) ([]order.Receipt, error) {
	p.lookups.Add(1)
	return p.Payer.FindCharges(ctx, l)
}

// TestPendingPaymentIsNeitherPaidNorFailed: a card asking for 3-D Secure
// leaves the PaymentIntent requires_action, the third outcome. The worker
// neither pays nor fails the order: it looks the order up instead of
// charging again (a create under the key would only replay the old answer),
// finds the payment still pending, and snoozes the job, which uses no
// attempt, so the order stays pending_payment with a job to settle it.
func TestPendingPaymentIsNeitherPaidNorFailed(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	id := b.pendingOrder(t, "pm_card_authenticationRequired", nil)
	payer := &countingPayer{Payer: b.payer}
	b.start(t, payer)

	deadline := time.Now().Add(10 * time.Second)
	for state, _ := b.job(t, id); payer.lookups.Load() == 0 || state != "scheduled"; state, _ = b.job(t, id) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d lookups, job %s; want the pending payment looked up and the job snoozed (scheduled)",
				payer.lookups.Load(), state)
		}
		time.Sleep(20 * time.Millisecond)
	}
	o, err := order.Get(context.Background(), b.db, id)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != order.StatusPendingPayment {
		t.Errorf("order = %s (%s), want pending_payment: the provider holds the payment neither paid nor failed", o.Status, o.FailureReason)
	}
	if got := testutil.ToFloat64(b.metrics.jobs.WithLabelValues(jobSnoozed)); got == 0 {
		t.Error("no job snoozed")
	}
	if st := b.sim.Stats(t); st.ChargesByReference[id.String()] != 0 || st.Declines != 0 {
		t.Errorf("provider: %d charges, %d declines; want neither", st.ChargesByReference[id.String()], st.Declines)
	}
}
