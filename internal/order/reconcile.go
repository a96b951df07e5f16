package order

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
)

// ReconcileArgs is the periodic safety net behind invariant 2 ("every
// unsettled order reaches a terminal state with no manual step"). Every
// order gets its charge job in the statement that creates it and the worker
// never lets River discard the job of an unsettled order, but a job can
// still vanish outside the code's control: deleted or cancelled in River
// UI, discarded by an older release, lost to a restore. The reconciler finds
// unsettled orders without a live job and enqueues one.
type ReconcileArgs struct{}

// Kind is the job kind River stores and routes by.
func (ReconcileArgs) Kind() string { return "reconcile_unsettled_orders" }

// Reconciler runs ReconcileArgs jobs.
type Reconciler struct {
	river.WorkerDefaults[ReconcileArgs]
	db       *pgxpool.Pool
	after    time.Duration
	log      *slog.Logger
	requeued prometheus.Counter
}

// NewReconciler returns the worker; orders untouched for longer than after
// are checked. reg receives checkout_orders_requeued_total.
func NewReconciler(db *pgxpool.Pool, after time.Duration, reg prometheus.Registerer, log *slog.Logger) (*Reconciler, error) {
	requeued := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "checkout_orders_requeued_total",
		Help: "Unsettled orders found without a live charge job and given a new one; anything above 0 deserves a look.",
	})
	if err := reg.Register(requeued); err != nil {
		return nil, err
	}
	return &Reconciler{db: db, after: after, log: log, requeued: requeued}, nil
}

// reconcileBatch bounds one run's work; the next run takes the rest.
const reconcileBatch = 1000

// Work enqueues a charge job for every unsettled order that has none.
func (r *Reconciler) Work(ctx context.Context, _ *river.Job[ReconcileArgs]) error {
	rows, err := r.db.Query(ctx, `
		SELECT o.id FROM orders o
		WHERE o.status IN ('pending', 'pending_payment') AND o.updated_at < now() - make_interval(secs => $1)
		  AND NOT EXISTS (
			SELECT 1 FROM river_job j
			WHERE j.kind = 'charge_order' AND j.args @> jsonb_build_object('order_id', o.id)
			  AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))
		ORDER BY o.updated_at
		LIMIT $2`, r.after.Seconds(), reconcileBatch)
	if err != nil {
		return fmt.Errorf("find unsettled orders without a charge job: %w", err)
	}
	orphans, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("find unsettled orders without a charge job: %w", err)
	}
	if len(orphans) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(orphans))
	for i, id := range orphans {
		params[i] = river.InsertManyParams{Args: ChargeArgs{OrderID: id}}
	}
	if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertMany(ctx, params); err != nil {
		return fmt.Errorf("requeue %d orders: %w", len(orphans), err)
	}
	r.requeued.Add(float64(len(orphans)))
	r.log.ErrorContext(ctx, "unsettled orders had no charge job; requeued them", "orders", len(orphans), "first", orphans[0])
	return nil
}

// PeriodicReconcile schedules the reconciler every interval, and once at start.
func PeriodicReconcile(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return ReconcileArgs{}, nil },
		&river.PeriodicJobOpts{ID: "reconcile_unsettled_orders", RunOnStart: true})
}
