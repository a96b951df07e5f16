package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/payment"
)

// ChargeWorker runs charge_order jobs: it charges orders the API could not
// charge synchronously (pending_payment) and orders whose API process died
// mid-request (pending), through a Payer of its own — its own breaker and
// bulkhead, so the worker's recovery traffic and the API's live traffic
// cannot starve each other.
//
// Outcomes:
//   - paid or declined: the order is settled and the job completed in one
//     transaction (river.JobCompleteTx), so a crash between the two cannot
//     leave a paid order with a job that charges it again — and if it could,
//     the provider idempotency key would turn that into a replay.
//   - breaker open or bulkhead full: the job snoozes until the breaker will
//     let a probe through. Snoozing does not use an attempt, so an outage of
//     any length never exhausts a job.
//   - transient failure: the error goes back to River, which retries on
//     NextRetry's schedule; after the last attempt the order is failed with
//     reason provider_unavailable, logged as an error and counted.
type ChargeWorker struct {
	river.WorkerDefaults[ChargeArgs]

	db      *pgxpool.Pool
	payer   Payer
	log     *slog.Logger
	metrics *WorkerMetrics
}

// NewChargeWorker returns the worker River runs for charge_order jobs.
func NewChargeWorker(db *pgxpool.Pool, payer Payer, metrics *WorkerMetrics, log *slog.Logger) *ChargeWorker {
	return &ChargeWorker{db: db, payer: payer, metrics: metrics, log: log}
}

// Job outcomes, the values of the outcome label of checkout_charge_jobs_total.
const (
	jobPaid           = "paid"
	jobDeclined       = "declined"
	jobRejected       = "rejected"        // the provider refused the request itself (our bug)
	jobAlreadySettled = "already_settled" // the API settled the order first
	jobSnoozed        = "snoozed"         // breaker open or bulkhead full
	jobRetried        = "retried"         // transient failure, River retries
	jobExhausted      = "exhausted"       // transient failures until MaxAttempts
)

// Timeout bounds one run of the job. The worker's policy makes a single
// attempt (River does the retrying), so the provider call takes at most the
// attempt timeout; 30 s leaves ample room for the two short transactions
// even on a slow database, and RescueStuckJobsAfter must exceed it.
func (w *ChargeWorker) Timeout(*river.Job[ChargeArgs]) time.Duration { return ChargeJobTimeout }

// ChargeJobTimeout is the charge_order job timeout (see Timeout).
const ChargeJobTimeout = 30 * time.Second

// NextRetry spaces retries after transient failures: exponential from 1 s,
// capped at 10 min, with "equal jitter" (half fixed, half random) so jobs
// that failed together do not return together, yet never retry sooner than
// half the step. With MaxChargeAttempts = 20 the schedule spans about two
// hours: 1, 2, 4 … 512 s (17 min in all), then ten retries 5–10 min apart.
func (w *ChargeWorker) NextRetry(job *river.Job[ChargeArgs]) time.Time {
	return time.Now().Add(retryDelay(job.Attempt))
}

func retryDelay(attempt int) time.Duration {
	const base, ceiling = time.Second, 10 * time.Minute
	d := ceiling
	if attempt <= 10 {
		d = min(ceiling, base<<max(0, attempt-1))
	}
	return d/2 + rand.N(d/2+1)
}

// Work charges one order.
func (w *ChargeWorker) Work(ctx context.Context, job *river.Job[ChargeArgs]) error {
	o, err := Get(ctx, w.db, job.Args.OrderID)
	if errors.Is(err, ErrNotFound) {
		// The job is inserted in the order's own transaction, so this is
		// impossible unless someone deleted the row: nothing to charge.
		w.log.ErrorContext(ctx, "charge job for a missing order", "order_id", job.Args.OrderID, "job_id", job.ID)
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if o.Status.Terminal() {
		w.metrics.jobs.WithLabelValues(jobAlreadySettled).Inc()
		return nil
	}
	if wait := w.payer.RetryAfter(); wait > 0 {
		return w.snooze(ctx, o, wait)
	}

	receipt, err := w.payer.Charge(ctx, payment.ChargeRequest{
		OrderID: o.ID.String(), Amount: o.Total, Currency: o.Currency, PaymentMethod: o.PaymentMethod,
	})
	switch {
	case err == nil:
		return w.settle(ctx, job, settlement{Status: StatusPaid, ChargeID: receipt.ChargeID}, jobPaid)
	case payment.IsDeclined(err):
		return w.settle(ctx, job, settlement{Status: StatusPaymentFailed, FailureReason: ReasonCardDeclined}, jobDeclined)
	case errors.Is(err, payment.ErrPermanent):
		w.log.ErrorContext(ctx, "payment provider rejected the charge request", "order_id", o.ID, "err", err)
		return w.settle(ctx, job, settlement{Status: StatusPaymentFailed, FailureReason: ReasonProviderRejected}, jobRejected)
	case payment.IsRefused(err):
		return w.snooze(ctx, o, w.payer.RetryAfter())
	case job.Attempt >= job.MaxAttempts:
		w.log.ErrorContext(ctx, "giving up on charging order: provider unavailable on every attempt",
			"order_id", o.ID, "attempts", job.Attempt, "err", err)
		return w.settle(ctx, job, settlement{Status: StatusPaymentFailed, FailureReason: ReasonProviderUnavailable}, jobExhausted)
	}
	w.metrics.jobs.WithLabelValues(jobRetried).Inc()
	return fmt.Errorf("charge order %s, attempt %d of %d: %w", o.ID, job.Attempt, job.MaxAttempts, err)
}

// snooze reschedules the job without using an attempt. The floor keeps a
// half-open breaker's rejected callers from spinning; the jitter spreads a
// backlog's jobs so the breaker's probes are not followed by a stampede.
func (w *ChargeWorker) snooze(ctx context.Context, o Order, wait time.Duration) error {
	wait = max(wait, 250*time.Millisecond)
	wait += rand.N(wait/2 + 1)
	w.metrics.jobs.WithLabelValues(jobSnoozed).Inc()
	w.log.DebugContext(ctx, "provider unavailable, snoozing charge", "order_id", o.ID, "snooze", wait)
	return river.JobSnooze(wait)
}

// settle moves the order to its final state and completes the job in one
// transaction.
func (w *ChargeWorker) settle(ctx context.Context, job *river.Job[ChargeArgs], to settlement, outcome string) error {
	err := pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
		o, changed, err := transition(ctx, tx, job.Args.OrderID, to)
		if err != nil {
			return err
		}
		if !changed {
			outcome = jobAlreadySettled
		}
		if o.Status == StatusPaymentFailed && changed {
			w.metrics.failed.WithLabelValues(o.FailureReason).Inc()
		}
		_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
	if err != nil {
		return fmt.Errorf("settle order %s: %w", job.Args.OrderID, err)
	}
	w.metrics.jobs.WithLabelValues(outcome).Inc()
	return nil
}

// WorkerMetrics are the worker's Prometheus collectors.
type WorkerMetrics struct {
	jobs   *prometheus.CounterVec
	failed *prometheus.CounterVec
}

// NewWorkerMetrics creates the worker's collectors on reg, including the
// backlog gauges computed from the database at scrape time.
func NewWorkerMetrics(reg prometheus.Registerer, db *pgxpool.Pool) (*WorkerMetrics, error) {
	m := &WorkerMetrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_charge_jobs_total",
			Help: "charge_order job runs by outcome: paid, declined, rejected, already_settled, snoozed, retried, exhausted.",
		}, []string{"outcome"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_orders_failed_total",
			Help: "Orders the worker moved to payment_failed, by reason; provider_unavailable means retries were exhausted.",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.jobs, m.failed, newBacklogCollector(db)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
