package order

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/resilientcheckout/checkout/internal/idempotency"
)

// ErrNotFound: no order has that id.
var ErrNotFound = errors.New("order not found")

// querier is what the storage functions need: a pool, a connection or a
// transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const orderColumns = `id, status, customer_id, currency, payment_method, items, total,
	coalesce(charge_id, ''), coalesce(failure_reason, ''), created_at, updated_at`

// insertOrderWithKeyAndJob is the first write of the checkout flow: claim
// the Idempotency-Key for lockFor (idempotency.ClaimSQL) and, only if it was
// new, insert the order and its charge job, due at jobAt. One statement is
// one round trip and one atomic unit — an order never exists without its key
// and its job — where an explicit transaction with River's InsertTx took four
// (BEGIN, order and key, job, COMMIT; see BenchmarkPlaceOrder). It returns
// pgx.ErrNoRows when the key existed; then nothing was written. The job is
// written 'scheduled', as InsertTx writes a job given a ScheduledAt.
//
// The key's foreign key to the order is checked at the end of the
// statement, when both rows exist. Timestamps come from the application's
// clock (see now).
func insertOrderWithKeyAndJob(ctx context.Context, q querier, o *Order, key string, fingerprint []byte, lockFor time.Duration, jobAt time.Time) (jobID int64, err error) {
	items, _ := json.Marshal(o.Items) // cannot fail: strings and integers only
	o.CreatedAt = now()
	o.UpdatedAt = o.CreatedAt
	job := newChargeJobRow(o.ID)
	args := idempotency.ClaimArgs(key, fingerprint, o.ID, lockFor)
	maps.Copy(args, pgx.NamedArgs{
		"status": o.Status, "customer_id": o.CustomerID, "currency": o.Currency,
		"payment_method": o.PaymentMethod, "items": items, "total": o.Total, "created_at": o.CreatedAt,
		"job_args": job.args, "job_kind": job.kind, "job_max_attempts": job.maxAttempts,
		"job_priority": job.priority, "job_queue": job.queue, "job_at": jobAt,
		"job_unique_key": job.uniqueKey, "job_unique_states": job.uniqueStates,
	})
	err = q.QueryRow(ctx, `
		WITH claimed AS (`+idempotency.ClaimSQL+`
		), created AS (
			INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total, created_at, updated_at)
			SELECT order_id, @status, @customer_id, @currency, @payment_method, @items, @total, @created_at, @created_at
			FROM claimed
			RETURNING id
		)
		INSERT INTO river_job (args, kind, max_attempts, priority, queue, scheduled_at, state, unique_key, unique_states)
		SELECT @job_args, @job_kind, @job_max_attempts, @job_priority, @job_queue, @job_at, 'scheduled',
		       @job_unique_key, @job_unique_states::integer::bit(8)
		FROM created
		RETURNING id`, args).Scan(&jobID)
	return jobID, err
}

// now is the time as Postgres stores it (microseconds, UTC), so an order
// rendered before it is written reads the same as after. Order timestamps
// come from the application's clock everywhere (insert, settle, worker), so
// an order's created_at and updated_at can never disagree through skew
// between the app's and the database's clocks.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// queueSettle queues the move of an unsettled order to o's status; it
// changes nothing if the order is already paid or failed.
func queueSettle(b *pgx.Batch, o Order) {
	b.Queue(`
		UPDATE orders
		SET status = $2, charge_id = nullif($3, ''), failure_reason = nullif($4, ''), updated_at = $5
		WHERE id = $1 AND status IN ('pending', 'pending_payment')`,
		o.ID, o.Status, o.ChargeID, o.FailureReason, o.UpdatedAt)
}

// Get loads an order.
func Get(ctx context.Context, q querier, id uuid.UUID) (Order, error) {
	o, err := scanOrder(q.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("load order %s: %w", id, err)
	}
	return o, nil
}

// settlement is a transition to a new status.
type settlement struct {
	Status        Status
	ChargeID      string // paid
	FailureReason string // payment_failed
}

// transition moves a non-terminal order to s and returns the updated order.
// It changes nothing when the order is already terminal — the API and the
// worker may race to settle the same order, and the first one wins — and
// then returns the order as it stands with changed false.
func transition(ctx context.Context, q querier, id uuid.UUID, s settlement) (o Order, changed bool, err error) {
	o, err = scanOrder(q.QueryRow(ctx, `
		UPDATE orders
		SET status = $2, charge_id = nullif($3, ''), failure_reason = nullif($4, ''), updated_at = $5
		WHERE id = $1 AND status IN ('pending', 'pending_payment')
		RETURNING `+orderColumns, id, s.Status, s.ChargeID, s.FailureReason, now()))
	if err == nil {
		return o, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Order{}, false, fmt.Errorf("settle order %s as %s: %w", id, s.Status, err)
	}
	o, err = Get(ctx, q, id)
	return o, false, err
}

func scanOrder(row pgx.Row) (Order, error) {
	var (
		o     Order
		items []byte
	)
	err := row.Scan(&o.ID, &o.Status, &o.CustomerID, &o.Currency, &o.PaymentMethod, &items, &o.Total,
		&o.ChargeID, &o.FailureReason, &o.CreatedAt, &o.UpdatedAt)
	if err != nil {
		return Order{}, err
	}
	if err := json.Unmarshal(items, &o.Items); err != nil {
		return Order{}, fmt.Errorf("decode items of order %s: %w", o.ID, err)
	}
	o.CreatedAt, o.UpdatedAt = o.CreatedAt.UTC(), o.UpdatedAt.UTC()
	return o, nil
}
