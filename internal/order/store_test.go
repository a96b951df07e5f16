package order

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
)

// TestBacklogReadsTheUnsettledIndexOnly is issue 17's fifth defect: the
// backlog gauges are computed at every scrape, so their query must cost what
// the backlog costs, not what the table does. The earlier form
// (unnest … LEFT JOIN orders) scanned the whole table.
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
		_, err := lookupKey(context.Background(), tx, "pruned", make([]byte, 32), time.Second)
		return err
	})
	if !errors.Is(err, errKeyVanished) {
		t.Errorf("lookupKey(pruned key) = %v, want errKeyVanished (Place then claims it anew)", err)
	}
}
