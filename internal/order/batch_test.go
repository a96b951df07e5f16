package order

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
)

// settleOutcome is what one settler.settle call returned.
type settleOutcome struct {
	res settleResult
	err error
}

// whileBlocked holds a lock in a transaction of its own (hold), starts a
// call whose statement waits on that lock (first), and once it waits runs
// enqueue — whose calls must queue behind it — waits until queued calls are
// in q, then releases the lock.
func whileBlocked[C any](t *testing.T, db *pgxpool.Pool, q *batcher[C], queued int, hold func(pgx.Tx) error, first, enqueue func()) {
	t.Helper()
	ctx := context.Background()
	lock, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if err := hold(lock); err != nil {
		t.Fatal(err)
	}
	go first()
	waitForALockWait(t, db)
	enqueue()
	waitQueued(t, q, queued)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitForALockWait returns once a session of the test's database waits for
// a lock.
func waitForALockWait(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		var waiting bool
		if err := db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no statement waits for the lock the test holds")
		}
	}
}

// behindABlockedStatement runs whileBlocked for a settler: the blocked call
// settles an order whose row the test holds. It returns that call's outcome.
func behindABlockedStatement(t *testing.T, db *pgxpool.Pool, b *settler, queued int, enqueue func()) settleOutcome {
	t.Helper()
	blocker := newPendingOrder(t, db, fmt.Sprintf("blocker-%p", b))
	first := make(chan settleOutcome, 1)
	whileBlocked(t, db, &b.b, queued, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `SELECT 1 FROM orders WHERE id = $1 FOR UPDATE`, orderID(blocker.ID))
		return err
	}, func() {
		res, err := b.settle(context.Background(), blocker, Settlement{Status: StatusPaid, ChargeID: "ch_blocker"})
		first <- settleOutcome{res, err}
	}, enqueue)
	return <-first
}

// oneTransaction checks that the latest versions of the orders ids were
// all written by one transaction (one xmin): one commit for the batch.
func oneTransaction(t *testing.T, db *pgxpool.Pool, ids []uuid.UUID) {
	t.Helper()
	pgIDs := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		pgIDs[i] = orderID(id)
	}
	var rows, xacts int
	if err := db.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT xmin::text) FROM orders WHERE id = ANY($1)`, pgIDs).
		Scan(&rows, &xacts); err != nil {
		t.Fatal(err)
	}
	if rows != len(ids) || xacts != 1 {
		t.Errorf("%d of the %d orders written by %d transactions, want all by one", rows, len(ids), xacts)
	}
}

// waitQueued returns once n calls wait in b's queue.
func waitQueued[C any](t *testing.T, b *batcher[C], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued, n)
		}
		runtime.Gosched()
	}
}

// leave starts call, whose request then stops waiting once the call is in
// q's queue: call must return the context's error at once.
func leave[C any](t *testing.T, q *batcher[C], call func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { gone <- call(ctx) }()
	waitQueued(t, q, 1)
	cancel()
	select {
	case err := <-gone:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call after its request left = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("call still waits 2 s after its request left")
	}
}

// batchSizes is the batch_size of every event named event on span.
func batchSizes(span sdktrace.ReadOnlySpan, event string) []int64 {
	var sizes []int64
	for _, ev := range span.Events() {
		for _, a := range ev.Attributes {
			if ev.Name == event && a.Key == "batch_size" {
				sizes = append(sizes, a.Value.AsInt64())
			}
		}
	}
	return sizes
}

// TestSettlesArrivingDuringAStatementShareTheNext: while one settle
// statement waits, the settles that arrive are run together in the next —
// one round trip and one commit — and each gets its own order's result.
func TestSettlesArrivingDuringAStatementShareTheNext(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
	b := newSettler(db, true, 10*time.Second)

	orders := make([]Order, 5)
	for i := range orders {
		orders[i] = newPendingOrder(t, db, fmt.Sprintf("batched-%d", i))
	}
	outcomes := make([]chan settleOutcome, len(orders))
	first := behindABlockedStatement(t, db, b, len(orders), func() {
		for i, o := range orders {
			outcomes[i] = make(chan settleOutcome, 1)
			go func() {
				ctx, span := tracer.Start(context.Background(), fmt.Sprint("request ", i))
				res, err := b.settle(ctx, o, Settlement{Status: StatusPaid, ChargeID: fmt.Sprint("ch_", i)})
				span.End() // before the outcome, which the span check waits for
				outcomes[i] <- settleOutcome{res, err}
			}()
		}
	})
	if first.err != nil || !first.res.changed || first.res.answered.ChargeID != "ch_blocker" {
		t.Errorf("blocked settle = %+v, %v; want it applied", first.res, first.err)
	}
	ids := make([]uuid.UUID, len(orders))
	for i, o := range orders {
		ids[i] = o.ID
		got := <-outcomes[i]
		want := fmt.Sprint("ch_", i)
		if got.err != nil || got.res.err != nil || !got.res.changed ||
			got.res.order.Status != StatusPaid || got.res.answered.Status != StatusPaid || got.res.answered.ChargeID != want {
			t.Errorf("settle of order %d = %+v, %v; want it paid by %s and answered so", i, got.res, got.err, want)
		}
		stored, err := Get(context.Background(), db, o.ID)
		if err != nil || stored.Status != StatusPaid || stored.ChargeID != want || !stored.UpdatedAt.Equal(got.res.order.UpdatedAt) {
			t.Errorf("stored order %d = %+v, %v; want paid by %s", i, stored, err, want)
		}
	}
	oneTransaction(t, db, ids)
	ended := spans.Ended()
	if len(ended) != len(orders) {
		t.Fatalf("%d request spans ended, want %d", len(ended), len(orders))
	}
	for _, s := range ended {
		sizes := batchSizes(s, "order settled")
		if len(sizes) != 1 || sizes[0] != int64(len(orders)) {
			t.Errorf("%s: settled in batches of %v, want one batch of all %d", s.Name(), sizes, len(orders))
		}
	}
}

// TestARefusedBatchIsSettledOrderByOrder: a statement the server refuses
// fails its whole pipeline; the orders in it are then settled one by one, so
// one bad row fails only its own request.
func TestARefusedBatchIsSettledOrderByOrder(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	b := newSettler(db, true, 10*time.Second)
	good1, bad, good2 := newPendingOrder(t, db, "good-1"), newPendingOrder(t, db, "bad"), newPendingOrder(t, db, "good-2")
	settlements := []struct {
		o  Order
		to Settlement
	}{
		{good1, Settlement{Status: StatusPaid, ChargeID: "ch_1"}},
		{bad, Settlement{Status: StatusPaid}}, // paid without a charge: orders_charge_id_iff_paid
		{good2, Settlement{Status: StatusPaymentFailed, FailureReason: ReasonCardDeclined}},
	}
	outcomes := make([]chan settleOutcome, len(settlements))
	behindABlockedStatement(t, db, b, len(settlements), func() {
		for i, s := range settlements {
			outcomes[i] = make(chan settleOutcome, 1)
			go func() {
				res, err := b.settle(ctx, s.o, s.to)
				outcomes[i] <- settleOutcome{res, err}
			}()
			// In this order in the queue, so the bad row is not the last.
			waitQueued(t, &b.b, i+1)
		}
	})
	var refused *pgconn.PgError
	if got := <-outcomes[1]; !errors.As(got.err, &refused) || refused.ConstraintName != "orders_charge_id_iff_paid" {
		t.Errorf("bad settle = %+v, %v; want the check constraint's refusal", got.res, got.err)
	}
	for _, i := range []int{0, 2} {
		got, s := <-outcomes[i], settlements[i]
		if got.err != nil || got.res.err != nil || !got.res.changed || got.res.answered.Status != s.to.Status {
			t.Errorf("settle of %s beside the bad one = %+v, %v; want it applied", s.to.Status, got.res, got.err)
		}
	}
	if stored, err := Get(ctx, db, bad.ID); err != nil || stored.Status != StatusPending {
		t.Errorf("bad order = %+v, %v; want it still pending", stored, err)
	}
}

// TestASecondSettleOfOneOrderInABatchFindsItSettled: two settles of one
// order in one pipeline behave as two statements would: the first applies,
// the second answers with the first's state.
func TestASecondSettleOfOneOrderInABatchFindsItSettled(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	b := newSettler(db, true, 10*time.Second)
	o := newPendingOrder(t, db, "twice")
	paid, late := make(chan settleOutcome, 1), make(chan settleOutcome, 1)
	behindABlockedStatement(t, db, b, 2, func() {
		go func() {
			res, err := b.settle(ctx, o, Settlement{Status: StatusPaid, ChargeID: "ch_first"})
			paid <- settleOutcome{res, err}
		}()
		waitQueued(t, &b.b, 1)
		go func() {
			res, err := b.settle(ctx, o, Settlement{Status: StatusPaymentFailed, FailureReason: ReasonCardDeclined})
			late <- settleOutcome{res, err}
		}()
	})
	if got := <-paid; got.err != nil || got.res.err != nil || !got.res.changed || got.res.answered.ChargeID != "ch_first" {
		t.Errorf("first settle = %+v, %v; want it applied", got.res, got.err)
	}
	if got := <-late; got.err != nil || got.res.err != nil || got.res.changed ||
		got.res.order.Status != StatusPaid || got.res.answered.Status != StatusPaid || got.res.answered.ChargeID != "ch_first" {
		t.Errorf("second settle = %+v, %v; want no change and the first's paid answer", got.res, got.err)
	}
}

// TestASettleWhoseRequestLeftStillRuns: a request that stops waiting gets
// its context's error at once, and its order is settled all the same — the
// charge it records has happened.
func TestASettleWhoseRequestLeftStillRuns(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	b := newSettler(db, true, 10*time.Second)
	left, next := newPendingOrder(t, db, "left"), newPendingOrder(t, db, "next")
	behindABlockedStatement(t, db, b, 1, func() {
		leave(t, &b.b, func(ctx context.Context) error {
			_, err := b.settle(ctx, left, Settlement{Status: StatusPaid, ChargeID: "ch_left"})
			return err
		})
	})
	// Statements run in queue order: once a later settle is done, so is
	// the abandoned one.
	if _, err := b.settle(context.Background(), next, Settlement{Status: StatusPaid, ChargeID: "ch_next"}); err != nil {
		t.Fatal(err)
	}
	if stored, err := Get(context.Background(), db, left.ID); err != nil || stored.Status != StatusPaid || stored.ChargeID != "ch_left" {
		t.Errorf("order whose request left = %+v, %v; want paid by ch_left", stored, err)
	}
}

// claimOf is a first write of a new order under key.
func claimOf(t *testing.T, key string) claimOp {
	t.Helper()
	o, err := newOrder(PlaceRequest{CustomerID: "cus_1", Currency: "USD", PaymentMethod: "pm_card_visa",
		Items: []Item{{SKU: "S", Quantity: 1, UnitPrice: 100}}}, 100)
	if err != nil {
		t.Fatal(err)
	}
	return claimOp{order: o, key: key, fingerprint: make([]byte, 32), lockFor: time.Minute}
}

// claimOutcome is what one claimer.claim call returned.
type claimOutcome struct {
	op  claimOp
	err error
}

// holdKey inserts key in tx, uncommitted: a claim of it waits for tx.
func holdKey(tx pgx.Tx, key string) error {
	_, err := tx.Exec(context.Background(), `INSERT INTO idempotency_keys (key, request_fingerprint) VALUES ($1, $2)`, key, make([]byte, 32))
	return err
}

// behindABlockedClaim runs whileBlocked for a claimer: the blocked call
// claims a key the test has inserted and not committed. It returns that
// call's outcome.
func behindABlockedClaim(t *testing.T, db *pgxpool.Pool, c *claimer, queued int, enqueue func()) claimOutcome {
	t.Helper()
	key := fmt.Sprintf("blocker-%p", c)
	in := claimOf(t, key)
	first := make(chan claimOutcome, 1)
	whileBlocked(t, db, &c.b, queued, func(tx pgx.Tx) error { return holdKey(tx, key) }, func() {
		op, err := c.claim(context.Background(), in)
		first <- claimOutcome{op, err}
	}, enqueue)
	return <-first
}

// TestFirstWritesArrivingDuringAStatementShareTheNext: while one first
// write waits, the ones that arrive are sent together in the next pipeline,
// and each request learns about its own key and order.
func TestFirstWritesArrivingDuringAStatementShareTheNext(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
	c := newClaimer(db, 10*time.Second)
	const n = 4
	outcomes := make([]chan claimOutcome, n)
	first := behindABlockedClaim(t, db, c, n, func() {
		for i := range outcomes {
			outcomes[i] = make(chan claimOutcome, 1)
			in := claimOf(t, fmt.Sprint("key-", i))
			go func() {
				ctx, span := tracer.Start(context.Background(), fmt.Sprint("request ", i))
				op, err := c.claim(ctx, in)
				span.End() // before the outcome, which the span check waits for
				outcomes[i] <- claimOutcome{op, err}
			}()
		}
	})
	if first.err != nil || !first.op.claimed {
		t.Errorf("blocked claim = %+v, %v; want the key claimed once the other transaction rolled back", first.op, first.err)
	}
	var ids []uuid.UUID
	for i := range outcomes {
		got := <-outcomes[i]
		if got.err != nil || !got.op.claimed || got.op.order.CreatedAt.IsZero() {
			t.Fatalf("claim %d = %+v, %v; want the key claimed and the order stored", i, got.op, got.err)
		}
		stored, err := Get(context.Background(), db, got.op.order.ID)
		if err != nil || stored.Status != StatusPending || !stored.CreatedAt.Equal(got.op.order.CreatedAt) {
			t.Errorf("stored order %d = %+v, %v; want it pending, created as the claim said", i, stored, err)
		}
		ids = append(ids, got.op.order.ID)
	}
	oneTransaction(t, db, ids)
	ended := spans.Ended()
	if len(ended) != n {
		t.Fatalf("%d request spans ended, want %d", len(ended), n)
	}
	for _, s := range ended {
		sizes := batchSizes(s, "order stored")
		if len(sizes) != 1 || sizes[0] != n {
			t.Errorf("%s: stored in batches of %v, want one batch of all %d", s.Name(), sizes, n)
		}
	}
}

// TestTwoClaimsOfOneKeyInABatchMakeOneOrder: in one pipeline the second
// claim of a key sees the first's row, as a later statement would: one
// order, and the second request goes on to look the key up.
func TestTwoClaimsOfOneKeyInABatchMakeOneOrder(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	c := newClaimer(db, 10*time.Second)
	outcomes := [2]chan claimOutcome{make(chan claimOutcome, 1), make(chan claimOutcome, 1)}
	behindABlockedClaim(t, db, c, 2, func() {
		for i := range outcomes {
			in := claimOf(t, "same")
			go func() {
				op, err := c.claim(context.Background(), in)
				outcomes[i] <- claimOutcome{op, err}
			}()
		}
	})
	a, b := <-outcomes[0], <-outcomes[1]
	if a.err != nil || b.err != nil || a.op.claimed == b.op.claimed {
		t.Fatalf("claims of one key = %+v, %v and %+v, %v; want exactly one claimed, no error", a.op, a.err, b.op, b.err)
	}
	var orders int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM orders o JOIN idempotency_keys k ON k.order_id = o.id WHERE k.key = 'same'`).Scan(&orders); err != nil || orders != 1 {
		t.Errorf("orders for the key = %d, %v; want 1", orders, err)
	}
}

// TestAClaimWhoseRequestLeftIsNotSent: a request that stopped waiting
// answers 503, which promises nothing was stored; its first write, still
// queued, must then never be sent.
func TestAClaimWhoseRequestLeftIsNotSent(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	c := newClaimer(db, 10*time.Second)
	left := claimOf(t, "left")
	behindABlockedClaim(t, db, c, 0, func() { // leaving withdrew it from the queue
		leave(t, &c.b, func(ctx context.Context) error {
			_, err := c.claim(ctx, left)
			return err
		})
	})
	// Pipelines run in queue order: once a later claim is done, the
	// abandoned one has had its turn.
	if _, err := c.claim(context.Background(), claimOf(t, "next")); err != nil {
		t.Fatal(err)
	}
	var keys, orders int
	if err := db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM idempotency_keys WHERE key = 'left'),
		(SELECT count(*) FROM orders WHERE id = $1)`, orderID(left.order.ID)).Scan(&keys, &orders); err != nil {
		t.Fatal(err)
	}
	if keys != 0 || orders != 0 {
		t.Errorf("after its request left: %d key rows, %d orders; want none", keys, orders)
	}
}

// TestAClaimWaitingOnALockIsCancelledByTheServer: a first write waiting on
// a lock is ended by the server (the pipeline's statement_timeout, a third
// of its timeout), rolled back, and the request told so while it still
// waits — rather than giving up on a statement the server may commit later.
func TestAClaimWaitingOnALockIsCancelledByTheServer(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	const timeout = 3 * time.Second
	c := newClaimer(db, timeout)
	in := claimOf(t, "in-flight")
	lock, err := db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.Background()) }()
	if err := holdKey(lock, in.key); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	_, err = c.claim(ctx, in) // waits on the key the test holds
	took := time.Since(start)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.QueryCanceled || took >= timeout {
		t.Fatalf("claim waiting on a held key = %v after %v; want the server's cancellation (57014) before the %v deadline", err, took, timeout)
	}
	if err := lock.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertNothingStored(t, db, in)
}

// assertNothingStored fails unless neither op's key nor its order exists.
func assertNothingStored(t *testing.T, db *pgxpool.Pool, op claimOp) {
	t.Helper()
	var keys, orders int
	if err := db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM idempotency_keys WHERE key = $1),
		(SELECT count(*) FROM orders WHERE id = $2)`, op.key, orderID(op.order.ID)).Scan(&keys, &orders); err != nil {
		t.Fatal(err)
	}
	if keys != 0 || orders != 0 {
		t.Errorf("claim of %q: %d key rows, %d orders; want none", op.key, keys, orders)
	}
}

// TestAClaimIsNotBoundedByAnotherRequestsDeadline: two requests queue
// behind a slow pipeline, one with a long budget and one with 400 ms. The
// short one can no longer wait for a pipeline and is never sent; the long
// one's pipeline — itself waiting on a lock for 600 ms — is not cut short
// by the other's deadline, and its order is stored.
func TestAClaimIsNotBoundedByAnotherRequestsDeadline(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	c := newClaimer(db, 3*time.Second) // bound 1 s; a call is sent with 1.5 s left
	long, short := claimOf(t, "long"), claimOf(t, "short")
	// The test holds long's key too, so that long's own pipeline waits.
	hold, err := db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(context.Background()) }()
	if err := holdKey(hold, long.key); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]chan claimOutcome{long.key: make(chan claimOutcome, 1), short.key: make(chan claimOutcome, 1)}
	behindABlockedClaim(t, db, c, 2, func() {
		for _, q := range []struct {
			in     claimOp
			budget time.Duration
		}{{long, 5 * time.Second}, {short, 400 * time.Millisecond}} {
			in, budget := q.in, q.budget
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				defer cancel()
				op, err := c.claim(ctx, in)
				outcomes[in.key] <- claimOutcome{op, err}
			}()
		}
	})
	waitForALockWait(t, db) // long's pipeline waits on its key
	time.Sleep(600 * time.Millisecond)
	if err := hold.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-outcomes[long.key]; got.err != nil || !got.op.claimed {
		t.Errorf("claim with a 5 s budget = %+v, %v; want it claimed", got.op, got.err)
	}
	if got := <-outcomes[short.key]; !errors.Is(got.err, errNotSent) {
		t.Errorf("claim with a 400 ms budget = %v; want errNotSent", got.err)
	}
	assertNothingStored(t, db, short)
}

// TestAHealthyClaimIsNotSentWithAnExpiredOne: a call whose request already
// gave up is taken out of the queue, never sent, and does not bound the
// pipeline of the call queued beside it.
func TestAHealthyClaimIsNotSentWithAnExpiredOne(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	c := newClaimer(db, 3*time.Second)
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	calls := []*batchCall[claimOp]{
		{ctx: expired, in: claimOf(t, "expired"), done: make(chan struct{})},
		{ctx: context.Background(), in: claimOf(t, "healthy"), done: make(chan struct{})},
	}
	c.b.queue, c.b.flushing = slices.Clone(calls), true // as do leaves them, before the flush runs
	c.b.flush()
	if gone, healthy := calls[0], calls[1]; !errors.Is(gone.err, errNotSent) || healthy.err != nil || !healthy.in.claimed {
		t.Fatalf("expired call: %v; healthy call: %v, claimed %v; want errNotSent, and the healthy one claimed", gone.err, healthy.err, healthy.in.claimed)
	}
	assertNothingStored(t, db, calls[0].in)
}

// TestOnlyRejectedPipelinesAreRerunOneByOne: a pipeline is re-run statement
// by statement only when the server refused what it would write; an
// unavailable database would refuse each statement again, one timeout after
// another, while every newer call waits.
func TestOnlyRejectedPipelinesAreRerunOneByOne(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		pgerrcode.CheckViolation:            true,
		pgerrcode.UniqueViolation:           true,
		pgerrcode.InvalidTextRepresentation: true,
		pgerrcode.DeadlockDetected:          true,
		pgerrcode.SerializationFailure:      true,
		pgerrcode.QueryCanceled:             false, // statement_timeout
		pgerrcode.AdminShutdown:             false,
		pgerrcode.CrashShutdown:             false,
		pgerrcode.CannotConnectNow:          false,
		pgerrcode.TooManyConnections:        false,
		pgerrcode.ConnectionFailure:         false,
	} {
		if got := rejected(fmt.Errorf("settle: %w", &pgconn.PgError{Code: code})); got != want {
			t.Errorf("rejected(SQLSTATE %s) = %v, want %v", code, got, want)
		}
	}
	if rejected(context.DeadlineExceeded) || rejected(nil) {
		t.Error("a timeout or no error counts as rejected")
	}
}
