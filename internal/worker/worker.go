// Package worker is the background side of checkout: a River client that
// runs the charge_order jobs (ChargeWorker), the sweeps that give unsettled
// orders without a job one (Sweeper), and the pruning of old
// Idempotency-Keys; its lifecycle (Run: start with retries, soft stop, then
// cancel); and the worker's own HTTP server (probes, metrics, River UI).
// cmd/worker reads the configuration and calls New and Run.
//
// The rules — what a charge outcome does to an order, which SQL settles it
// — are internal/order's; this package decides when to run them.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"riverqueue.com/riverui"

	"github.com/resilientcheckout/checkout/internal/idempotency"
	"github.com/resilientcheckout/checkout/internal/ledger"
	"github.com/resilientcheckout/checkout/internal/order"
)

// Config is the worker's behaviour.
type Config struct {
	// Concurrency is how many charges run at once (queue payments).
	Concurrency int
	Charge      ChargePolicy
	Schedule    Schedule
	// RescueStuckJobsAfter must exceed ChargeJobTimeout: River rescues a job
	// only once it has run this long, so a worker killed mid-charge has its
	// job retried.
	RescueStuckJobsAfter time.Duration
	// KeyRetention and PruneInterval: how long Idempotency-Keys are kept,
	// and how often the expired ones are deleted.
	KeyRetention, PruneInterval time.Duration
	// ShutdownTimeout bounds the soft stop: running charges may finish.
	ShutdownTimeout time.Duration
	// PollOnly makes River poll for new jobs and leadership instead of
	// using LISTEN/NOTIFY, which needs a session of its own: required
	// behind a pooler in transaction mode (PgBouncer), which hands the
	// listening session to other clients and drops its notifications. A
	// newly available job then waits for the next fetch
	// (fetchPollInterval).
	PollOnly bool
	// Ledger tunes the walk of the provider's charge list (ledger.Reconciler);
	// a zero Interval turns it off.
	Ledger ledger.Config
	// Plugins are River plugins for the worker's client, e.g.
	// telemetry.RiverPlugin: its work spans link each charge to the
	// request that deferred the order.
	Plugins []rivertype.Plugin
}

// fetchPollInterval is how often River looks for jobs that became due
// without a notification: every snoozed charge (a refused call, a charge
// the provider still works on) and every deferred order's job, which
// checkout schedules for when the breaker lets a probe through. River's
// default, 1 s, adds up to a second to each of those waits — after a
// hang, to the time the last order is paid. A fetch is one indexed query.
const fetchPollInterval = 200 * time.Millisecond

// Worker is the River client with every job the worker runs.
type Worker struct {
	jobs    *river.Client[pgx.Tx]
	ui      *riverui.Handler
	timeout time.Duration
	log     *slog.Logger
}

// New builds the worker on db, charging through payer and reconciling the
// provider's charge list charges with the orders, with its metrics on reg.
func New(db *pgxpool.Pool, payer order.Payer, charges ledger.ChargeList, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Worker, error) {
	metrics, err := NewMetrics(reg, db)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	sweeper, err := NewSweeper(db, cfg.Schedule, reg, log)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, NewChargeWorker(db, payer, cfg.Charge, metrics, log))
	periodic := append(PeriodicSweeps(cfg.Schedule), idempotency.PeriodicPrune(cfg.PruneInterval))
	if charges != nil && cfg.Ledger.Interval > 0 {
		reconciler, err := ledger.New(db, charges, cfg.Ledger, reg, log)
		if err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
		river.AddWorker(workers, reconciler)
		periodic = append(periodic, ledger.Periodic(cfg.Ledger))
	}
	river.AddWorker(workers, sweeper)
	river.AddWorker(workers, idempotency.NewPruneWorker(db, cfg.KeyRetention, log))
	jobs, err := river.NewClient(riverpgxv5.New(db), &river.Config{
		Queues: map[string]river.QueueConfig{
			order.QueuePayments: {MaxWorkers: cfg.Concurrency},
			river.QueueDefault:  {MaxWorkers: 1}, // housekeeping: sweeps, pruning keys, the ledger walk
		},
		Workers:              workers,
		PeriodicJobs:         periodic,
		FetchPollInterval:    fetchPollInterval,
		JobTimeout:           ChargeJobTimeout,
		RescueStuckJobsAfter: cfg.RescueStuckJobsAfter,
		PollOnly:             cfg.PollOnly,
		Logger:               log,
		Plugins:              cfg.Plugins,
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(jobs, nil), Logger: log, Prefix: "/riverui",
	})
	if err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}
	return &Worker{jobs: jobs, ui: ui, timeout: cfg.ShutdownTimeout, log: log}, nil
}

// UI is River UI, to be mounted at /riverui (see Routes).
func (w *Worker) UI() http.Handler { return w.ui }

// Run starts River and River UI, retrying while the database is unreachable
// (the process must come up anyway and report /ready 503), and when ctx is
// done stops River softly — running jobs finish — then cancels what is
// still running after the shutdown timeout. Jobs cancelled that way snooze
// (ChargeWorker.Work) and run again at once on the next worker, and the
// provider idempotency key makes the retry of a charge that did go through
// a harmless replay.
func (w *Worker) Run(ctx context.Context) error {
	// River's work contexts derive from Start's: keep them alive past the
	// signal so the soft stop can let running charges finish.
	workCtx := context.WithoutCancel(ctx)
	for {
		err := w.jobs.Start(workCtx)
		if err == nil {
			break
		}
		w.log.WarnContext(ctx, "river did not start, retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	if err := w.ui.Start(workCtx); err != nil {
		w.log.WarnContext(ctx, "river ui did not start", "err", err)
	}
	<-ctx.Done()

	stopCtx, cancel := context.WithTimeout(workCtx, w.timeout)
	defer cancel()
	if err := w.jobs.Stop(stopCtx); err == nil {
		return nil
	} else if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stop river: %w", err)
	}
	w.log.Warn("jobs still running after the shutdown timeout, cancelling them", "timeout", w.timeout)
	cancelCtx, cancelStop := context.WithTimeout(workCtx, 5*time.Second)
	defer cancelStop()
	return w.jobs.StopAndCancel(cancelCtx)
}
