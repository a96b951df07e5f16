package order

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// behindABlockedStatement starts a settle whose statement waits on a row
// lock the test holds, runs enqueue — whose settles must queue behind it —
// waits until queued calls are in the settler's queue, then lets the
// blocked statement finish. It returns the blocked call's outcome.
func behindABlockedStatement(t *testing.T, db *pgxpool.Pool, b *settler, queued int, enqueue func()) settleOutcome {
	t.Helper()
	ctx := context.Background()
	blocker := newPendingOrder(t, db, fmt.Sprintf("blocker-%p", b))
	lock, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `SELECT 1 FROM orders WHERE id = $1 FOR UPDATE`, orderID(blocker.ID)); err != nil {
		t.Fatal(err)
	}
	first := make(chan settleOutcome, 1)
	go func() {
		res, err := b.settle(ctx, blocker, Settlement{Status: StatusPaid, ChargeID: "ch_blocker"})
		first <- settleOutcome{res, err}
	}()
	for waiting := false; !waiting; {
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	enqueue()
	waitQueued(t, b, queued)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	return <-first
}

// waitQueued returns once n calls wait in b's queue.
func waitQueued(t *testing.T, b *settler, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d settles queued, want %d", queued, n)
		}
		runtime.Gosched()
	}
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
				defer span.End()
				res, err := b.settle(ctx, o, Settlement{Status: StatusPaid, ChargeID: fmt.Sprint("ch_", i)})
				outcomes[i] <- settleOutcome{res, err}
			}()
		}
	})
	if first.err != nil || !first.res.changed || first.res.answered.ChargeID != "ch_blocker" {
		t.Errorf("blocked settle = %+v, %v; want it applied", first.res, first.err)
	}
	for i, o := range orders {
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
	ended := spans.Ended()
	if len(ended) != len(orders) {
		t.Fatalf("%d request spans ended, want %d", len(ended), len(orders))
	}
	for _, s := range ended {
		var sizes []int64
		for _, ev := range s.Events() {
			for _, a := range ev.Attributes {
				if ev.Name == "order settled" && a.Key == "settle.batch_size" {
					sizes = append(sizes, a.Value.AsInt64())
				}
			}
		}
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
			waitQueued(t, b, i+1)
		}
	})
	var refused *pgconn.PgError
	if got := <-outcomes[1]; !errors.As(got.res.err, &refused) || refused.ConstraintName != "orders_charge_id_iff_paid" {
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
		waitQueued(t, b, 1)
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
	gone := make(chan error, 1)
	behindABlockedStatement(t, db, b, 1, func() {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			_, err := b.settle(ctx, left, Settlement{Status: StatusPaid, ChargeID: "ch_left"})
			gone <- err
		}()
		waitQueued(t, b, 1)
		cancel()
		select {
		case err := <-gone:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("settle after its request left = %v, want context.Canceled", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("settle still waits 2 s after its request left")
		}
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
