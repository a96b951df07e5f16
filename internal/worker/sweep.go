package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/resilientcheckout/checkout/internal/order"
)

// SweepArgs is the periodic job that gives unsettled orders without a live
// charge job one. It keeps an invariant of docs/design.md, "Invariants" ("every unsettled order
// reaches a terminal state with no manual step") in two cases:
//
//   - pending orders whose placing request died (process killed, database
//     lost mid-request, no fallback in modes none/timeout). The pending row
//     is the durable intent; checkout writes no job on its happy path.
//     Swept once they are older than the longest request (After), so the
//     crash-recovery time is After + Interval + the worker's pickup.
//   - pending_payment orders whose job vanished outside the code's control
//     (deleted or cancelled in River UI, a restore, a job River discarded
//     after its workers died on it JobMaxAttempts times). Their jobs are
//     written with the order, so this is rare: they are swept on the slow
//     reconcile schedule and counted in checkout_orders_requeued_total.
type SweepArgs struct {
	Status order.Status `json:"status"`
}

// Kind is the job kind River stores and routes by.
func (SweepArgs) Kind() string { return "sweep_unsettled_orders" }

// Sweeper runs SweepArgs jobs.
type Sweeper struct {
	river.WorkerDefaults[SweepArgs]
	db       *pgxpool.Pool
	after    map[order.Status]time.Duration
	log      *slog.Logger
	requeued *prometheus.CounterVec
}

// sweepBatch bounds one run's work; the next run takes the rest.
const sweepBatch = 1000

// Work enqueues a charge job for every order in the job's status that has
// gone unchanged for longer than its sweep's After and has no live job.
func (s *Sweeper) Work(ctx context.Context, job *river.Job[SweepArgs]) error {
	status := job.Args.Status
	ids, err := order.Unsettled(ctx, s.db, status, s.after[status], sweepBatch)
	if err != nil || len(ids) == 0 {
		return err
	}
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: order.ChargeArgs{OrderID: id}}
	}
	// Charge jobs are unique per order among live jobs, so a job inserted
	// meanwhile (the API's fallback) makes this insert a no-op.
	if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertMany(ctx, params); err != nil {
		return fmt.Errorf("give %d %s orders a charge job: %w", len(ids), status, err)
	}
	s.requeued.WithLabelValues(string(status)).Add(float64(len(ids)))
	level := slog.LevelInfo // a request died: expected now and then
	if status != order.StatusPending {
		level = slog.LevelError // a job vanished: worth a look
	}
	s.log.Log(ctx, level, "unsettled orders had no charge job; gave them one", "status", status, "orders", len(ids), "first", ids[0])
	return nil
}

// Schedule is how often each sweep runs and how old an order must be.
type Schedule struct {
	// SweepAfter must exceed the longest checkout request (7 s with the
	// defaults, order.Config.LockTTL), or the worker charges orders whose
	// request is still running — harmless (one provider key: the provider
	// replays), but a wasted call.
	SweepAfter, SweepInterval         time.Duration
	ReconcileAfter, ReconcileInterval time.Duration
}

// DefaultSchedule: pending orders are taken over 10 s after they were
// placed, checked every 5 s — a crash costs an order at most ~15 s plus the
// worker's pickup. Vanished jobs are an operator's doing and rarer: every
// 5 min for orders untouched for 10 min.
func DefaultSchedule() Schedule {
	return Schedule{
		SweepAfter: 10 * time.Second, SweepInterval: 5 * time.Second,
		ReconcileAfter: 10 * time.Minute, ReconcileInterval: 5 * time.Minute,
	}
}

// NewSweeper returns the worker; reg receives checkout_orders_requeued_total.
func NewSweeper(db *pgxpool.Pool, sch Schedule, reg prometheus.Registerer, log *slog.Logger) (*Sweeper, error) {
	requeued := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "checkout_orders_requeued_total",
		Help: "Unsettled orders given a charge job by the sweep, by status: pending (their request died) is expected after a crash; pending_payment (their job vanished) deserves a look.",
	}, []string{"status"})
	if err := reg.Register(requeued); err != nil {
		return nil, err
	}
	for _, s := range order.UnsettledStatuses {
		requeued.WithLabelValues(string(s)) // exported at 0 from the start, for alerts
	}
	return &Sweeper{db: db, log: log, requeued: requeued, after: map[order.Status]time.Duration{
		order.StatusPending:        sch.SweepAfter,
		order.StatusPendingPayment: sch.ReconcileAfter,
	}}, nil
}

// PeriodicSweeps schedules both sweeps, each once at start too.
func PeriodicSweeps(sch Schedule) []*river.PeriodicJob {
	periodic := func(status order.Status, every time.Duration) *river.PeriodicJob {
		return river.NewPeriodicJob(river.PeriodicInterval(every),
			func() (river.JobArgs, *river.InsertOpts) { return SweepArgs{Status: status}, nil },
			&river.PeriodicJobOpts{ID: "sweep_" + string(status), RunOnStart: true})
	}
	return []*river.PeriodicJob{
		periodic(order.StatusPending, sch.SweepInterval),
		periodic(order.StatusPendingPayment, sch.ReconcileInterval),
	}
}
