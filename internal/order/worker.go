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
//     NextRetry's schedule.
//   - the last attempt fails: if the provider certainly charged nothing
//     (payment.NotCharged), the order fails with reason provider_unavailable,
//     logged as an error and counted. If the outcome is ambiguous — a timeout
//     or lost response after which the provider may hold a charge — failing
//     the order could fail a paid one, so the job stays alive, retrying with
//     the same key every 10 minutes, logged and counted as unresolved until
//     the provider gives a definite answer. The job of an unsettled order is
//     never left for River to discard.
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
	jobRetried        = "retried"         // a failure River retries
	jobExhausted      = "exhausted"       // every attempt failed and the provider surely charged nothing
	jobUnresolved     = "unresolved"      // every attempt failed, at least the last one ambiguously
	jobInterrupted    = "interrupted"     // shutdown cancelled the run; it runs again at once
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
// half the step. With MaxChargeAttempts = 20 the schedule spans one to two
// hours: 1, 2, 4 … 512 s (9–17 min in all), then nine retries 5–10 min apart.
func (w *ChargeWorker) NextRetry(job *river.Job[ChargeArgs]) time.Time {
	return time.Now().Add(retryDelay(job.Attempt))
}

// retryCeiling is the longest wait between retries, also the pace at which
// an unresolved charge keeps asking the provider.
const retryCeiling = 10 * time.Minute

func retryDelay(attempt int) time.Duration {
	const base, ceiling = time.Second, retryCeiling
	d := ceiling
	if attempt <= 10 {
		d = min(ceiling, base<<max(0, attempt-1))
	}
	return d/2 + rand.N(d/2+1)
}

// Work charges one order. It decides what River does with the job: River
// discards a job whose last attempt returns an error, and the job of an
// unsettled order must never be discarded.
func (w *ChargeWorker) Work(ctx context.Context, job *river.Job[ChargeArgs]) error {
	err := w.work(ctx, job)
	var snooze *river.JobSnoozeError
	var cancel *river.JobCancelError
	switch {
	case err == nil, errors.As(err, &snooze), errors.As(err, &cancel):
		return err
	case errors.Is(ctx.Err(), context.Canceled):
		// Shutdown cancelled the run (StopAndCancel): run it again as soon
		// as a worker starts, without spending an attempt.
		w.metrics.jobs.WithLabelValues(jobInterrupted).Inc()
		return river.JobSnooze(0)
	case job.Attempt < job.MaxAttempts:
		w.metrics.jobs.WithLabelValues(jobRetried).Inc()
		return err
	}
	w.log.ErrorContext(ctx, "charge unresolved after every attempt; retrying with the same key until the provider answers",
		"order_id", job.Args.OrderID, "attempts", job.Attempt, "err", err)
	w.metrics.jobs.WithLabelValues(jobUnresolved).Inc()
	return river.JobSnooze(retryCeiling)
}

func (w *ChargeWorker) work(ctx context.Context, job *river.Job[ChargeArgs]) error {
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
	case job.Attempt >= job.MaxAttempts && payment.NotCharged(err):
		w.log.ErrorContext(ctx, "giving up on charging order: provider unavailable on every attempt",
			"order_id", o.ID, "attempts", job.Attempt, "err", err)
		return w.settle(ctx, job, settlement{Status: StatusPaymentFailed, FailureReason: ReasonProviderUnavailable}, jobExhausted)
	}
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
			Help: "charge_order job runs by outcome: paid, declined, rejected, already_settled, snoozed, retried, exhausted (failed: provider surely charged nothing), unresolved (ambiguous after every attempt: kept retrying), interrupted (by shutdown).",
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
