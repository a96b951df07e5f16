package order

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
)

// TestBacklogReadsTheUnsettledIndexOnly: the backlog gauges are computed
// at every scrape, so their query must cost what the backlog costs, not what
// the table does; a form such as unnest … LEFT JOIN orders would scan the
// whole table.
func TestBacklogReadsTheUnsettledIndexOnly(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total, charge_id)
		SELECT gen_random_uuid(), 'paid', 'cus_1', 'USD', 'pm', '[{"sku":"S","quantity":1,"unit_price":1}]', 1, 'ch_' || i
		FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total, created_at)
		SELECT gen_random_uuid(), 'pending_payment', 'cus_1', 'USD', 'pm', '[{"sku":"S","quantity":1,"unit_price":1}]', 1,
		       now() - make_interval(secs => i)
		FROM generate_series(1, 3) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE orders`); err != nil {
		t.Fatal(err)
	}
	rows, _ := db.Query(ctx, `EXPLAIN `+backlogSQL)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if joined := strings.Join(lines, "\n"); strings.Contains(joined, "Seq Scan") || !strings.Contains(joined, "orders_unsettled_idx") {
		t.Errorf("backlog plan does not read orders_unsettled_idx alone:\n%s", joined)
	}

	backlog, err := Backlog(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(backlog) != 2 || backlog[0] != (BacklogEntry{Status: StatusPending}) ||
		backlog[1].Status != StatusPendingPayment || backlog[1].Count != 3 || backlog[1].Oldest < 3*time.Second {
		t.Errorf("Backlog = %+v, want pending 0 and pending_payment 3 with the oldest ≥ 3 s old", backlog)
	}
}

// TestUnsettledStatusesMatchTheirSQL: the status list is written twice, once
// as Go values and once as the SQL literal the partial index predicate
// needs; they must say the same thing, and name exactly the non-terminal
// states.
func TestUnsettledStatusesMatchTheirSQL(t *testing.T) {
	t.Parallel()
	var quoted []string
	for _, s := range []Status{StatusPending, StatusPendingPayment, StatusPaid, StatusPaymentFailed} {
		if !s.Terminal() {
			quoted = append(quoted, "'"+string(s)+"'")
		}
	}
	if got, want := unsettledSQL, "("+strings.Join(quoted, ", ")+")"; got != want {
		t.Errorf("unsettledSQL = %s, want %s", got, want)
	}
	if len(UnsettledStatuses) != len(quoted) {
		t.Errorf("UnsettledStatuses = %v, want the %d non-terminal states", UnsettledStatuses, len(quoted))
	}
}

// TestLookupOfAPrunedKey: a key deleted by the retention job between a
// request's claim (which found it) and its lookup is a new key, not a 500.
func TestLookupOfAPrunedKey(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	err := pgx.BeginFunc(context.Background(), db, func(tx pgx.Tx) error {
		_, err := lookupKey(context.Background(), tx, "", "pruned", make([]byte, 32), time.Second)
		return err
	})
	if !errors.Is(err, errKeyVanished) {
		t.Errorf("lookupKey(pruned key) = %v, want errKeyVanished (Place then claims it anew)", err)
	}
}

// newPendingOrder stores a pending order under a fresh key, as the first
// write of the checkout flow does.
func newPendingOrder(t *testing.T, db *pgxpool.Pool, key string) Order {
	t.Helper()
	o, err := newOrder(PlaceRequest{CustomerID: "cus_1", Currency: "USD", PaymentMethod: "pm_card_visa",
		Items: []Item{{SKU: "S", Quantity: 1, UnitPrice: 100}}}, 100)
	if err != nil {
		t.Fatal(err)
	}
	op := claimOp{order: o, key: key, fingerprint: make([]byte, 32), lockFor: time.Minute}
	conn, err := db.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := insertOrdersWithKeys(context.Background(), conn.Conn(), []*claimOp{&op}, 0); err != nil || !op.claimed {
		t.Fatalf("insert pending order: %v (claimed %v)", err, op.claimed)
	}
	return op.order
}

// TestConcurrentSettlesTheFirstWins: a settle that had to wait for another
// one's row lock judges "still unsettled" on the row the other committed —
// it changes nothing and answers with the winner's state — even though its
// statement began when the order was pending.
func TestConcurrentSettlesTheFirstWins(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	base := newPendingOrder(t, db, "race")

	first, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(ctx) }()
	if _, changed, err := Settle(ctx, first, base, Settlement{Status: StatusPaid, ChargeID: "ch_first"}); err != nil || !changed {
		t.Fatalf("first Settle = %v, changed %v; want it applied", err, changed)
	}

	type result struct {
		o, answered Order
		changed     bool
		err         error
	}
	second := make(chan result, 1)
	go func() {
		var r result
		r.o, r.answered, r.changed, r.err = settleCommit(ctx, db, base,
			Settlement{Status: StatusPaymentFailed, FailureReason: ReasonCardDeclined}, true, true)
		second <- r
	}()
	// Commit the first only once the second waits for its row lock.
	for waiting := false; !waiting; {
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r := <-second
	if r.err != nil || r.changed {
		t.Fatalf("second settle = %v, changed %v; want no error and no change", r.err, r.changed)
	}
	if r.o.Status != StatusPaid || r.o.ChargeID != "ch_first" || r.o.FailureReason != "" {
		t.Errorf("second settle returned %s/%q/%q, want the first's paid/ch_first", r.o.Status, r.o.ChargeID, r.o.FailureReason)
	}
	if r.answered.Status != StatusPaid || r.answered.ChargeID != "ch_first" {
		t.Errorf("answer = %+v, want the first settle's paid order", r.answered)
	}
	stored, err := Get(ctx, db, base.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != StatusPaid || stored.ChargeID != "ch_first" || stored.FailureReason != "" || !stored.UpdatedAt.Equal(r.o.UpdatedAt) {
		t.Errorf("stored order %+v, want paid with ch_first, updated when the first settle ran (%v)", stored, r.o.UpdatedAt)
	}
}

// TestSettleRecordsTheFirstAnswerOnly: the answer of an order is the state
// its first answered settle left it in; a later settle with an answer — a
// request that outlived its lock — neither changes the order nor the answer.
func TestSettleRecordsTheFirstAnswerOnly(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	base := newPendingOrder(t, db, "answer")

	o, answered, changed, err := settleCommit(ctx, db, base, Settlement{Status: StatusPendingPayment}, true, false)
	if err != nil || !changed || o.Status != StatusPendingPayment || answered.Status != StatusPendingPayment || !answered.UpdatedAt.Equal(o.UpdatedAt) {
		t.Fatalf("deferral = %+v, answer %+v, changed %v, %v; want pending_payment answered as such", o, answered, changed, err)
	}
	// The worker charges it: no answer of its own.
	paid, changed, err := Settle(ctx, db, o, Settlement{Status: StatusPaid, ChargeID: "ch_worker"})
	if err != nil || !changed || paid.Status != StatusPaid {
		t.Fatalf("worker Settle = %+v, changed %v, %v; want paid", paid, changed, err)
	}
	// The request that deferred it, had it outlived its lock, settles again.
	late, lateAnswer, changed, err := settleCommit(ctx, db, base, Settlement{Status: StatusPaymentFailed, FailureReason: ReasonCardDeclined}, true, false)
	if err != nil || changed {
		t.Fatalf("late settle: %v, changed %v; want no change", err, changed)
	}
	if late.Status != StatusPaid || late.ChargeID != "ch_worker" {
		t.Errorf("late settle returned %+v, want the worker's paid order", late)
	}
	if lateAnswer.Status != StatusPendingPayment || !lateAnswer.UpdatedAt.Equal(answered.UpdatedAt) || lateAnswer.ChargeID != "" {
		t.Errorf("late settle's answer = %+v, want the first answer %+v", lateAnswer, answered)
	}

	// An order the worker settled before its request answered gets the
	// worker's state as the answer.
	other := newPendingOrder(t, db, "worker-first")
	if _, _, err := Settle(ctx, db, other, Settlement{Status: StatusPaid, ChargeID: "ch_w"}); err != nil {
		t.Fatal(err)
	}
	_, ans, changed, err := settleCommit(ctx, db, other, Settlement{Status: StatusPaid, ChargeID: "ch_api"}, true, true)
	if err != nil || changed || ans.Status != StatusPaid || ans.ChargeID != "ch_w" {
		t.Errorf("API settle after the worker's: answer %+v, changed %v, %v; want the worker's paid/ch_w, unchanged", ans, changed, err)
	}

	if _, _, _, err := settleCommit(ctx, db, Order{ID: uuid.New()}, Settlement{Status: StatusPaid, ChargeID: "ch"}, true, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("settle of an unknown order = %v, want ErrNotFound", err)
	}
}

// TestAnAttemptIsNotMarkedOnASettledOrder: a request that resumed an order
// the worker settled after the request's key lookup learns so from
// MarkAttempt, and must not charge it; on an unsettled order the attempt
// is recorded, and a settle from a lookup made before it is refused.
func TestAnAttemptIsNotMarkedOnASettledOrder(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	loaded := newPendingOrder(t, db, "k")
	if marked, err := MarkAttempt(ctx, db, loaded.ID); err != nil || !marked {
		t.Fatalf("MarkAttempt on a pending order = %v, %v; want marked", marked, err)
	}
	failed := Settlement{Status: StatusPaymentFailed, FailureReason: ReasonProviderUnavailable}
	if o, changed, err := SettleFromLookup(ctx, db, loaded, failed); err != nil || changed || o.Status != StatusPending {
		t.Fatalf("settle from a lookup older than the last attempt = %s, changed %v, %v; want it refused", o.Status, changed, err)
	}
	current, err := Get(ctx, db, loaded.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, changed, err := SettleFromLookup(ctx, db, current, failed); err != nil || !changed {
		t.Fatalf("settle from a lookup after the last attempt: changed %v, %v; want applied", changed, err)
	}
	if marked, err := MarkAttempt(ctx, db, loaded.ID); err != nil || marked {
		t.Errorf("MarkAttempt on a failed order = %v, %v; want nothing marked", marked, err)
	}
}

// TestAnUnansweredCommitIsAnUnknownOutcome: a first write's COMMIT that is
// sent and not answered in time — here a deferred trigger makes the commit
// itself slow — is an unknown outcome, never "nothing stored". pgx cancels
// the statement when it gives up, which mostly rolls it back; but a commit
// past the point where a cancel can stop it (its WAL flush, a synchronous
// standby's confirmation: "committed locally") stands. The trigger stands
// in for that: it outlives the cancel, and the order is stored after the
// client gave up.
func TestAnUnansweredCommitIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			BEGIN PERFORM pg_sleep(0.6);
			EXCEPTION WHEN query_canceled THEN
				-- Outlive the cancel (and any second one) by 0.2 s, so the
				-- answer comes after the client gave up.
				FOR i IN 1..5 LOOP
					BEGIN PERFORM pg_sleep(0.2); EXIT; EXCEPTION WHEN query_canceled THEN NULL; END;
				END LOOP;
			END;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON idempotency_keys
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();`); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	op := claimOf(t, "slow-commit")
	// The client gives up while the COMMIT is in the trigger's sleep, seen
	// from another connection — not after a fixed time, which on a busy
	// machine can land on the INSERT before it, whose cancel rolls the
	// whole transaction back.
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	pid := conn.Conn().PgConn().PID()
	go func() {
		defer cancel()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			var sleeping bool
			if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep')`,
				pid).Scan(&sleeping); err != nil || sleeping {
				return
			}
		}
	}()
	// A statement timeout well past the sleeps: it cancels too, and is not what this is about.
	err = insertOrdersWithKeys(short, conn.Conn(), []*claimOp{&op}, 10*time.Second)
	if !errors.Is(err, errOutcomeUnknown) {
		t.Fatalf("COMMIT unanswered within the deadline = %v; want errOutcomeUnknown", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := Get(ctx, db, op.order.ID); err == nil {
			return // stored after all: the answer was right not to say otherwise
		}
		if time.Now().After(deadline) {
			t.Fatal("the order whose COMMIT went unanswered was never stored; the test shows less than it claims")
		}
	}
}
