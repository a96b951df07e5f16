package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/order"
)

// ChargeWorker runs charge_order jobs: it charges orders the API could not
// charge synchronously (pending_payment) and orders whose API process died
// mid-request (pending, given a job by the sweep), through a Payer of its
// own — its own breaker and concurrency limit, so the worker's recovery
// traffic and the API's live traffic cannot starve each other.
//
// Outcomes (the decision table itself is order.Charge):
//   - paid or declined: the order is settled and the job completed in one
//     transaction (river.JobCompleteTx); if a crash separated the two, the
//     job's next run would find the order settled.
//   - breaker open or limit full: the job snoozes until the breaker will
//     let a probe through. Snoozing does not use an attempt, so an outage of
//     any length never exhausts a job.
//   - the payment pending at the provider (a PaymentIntent processing or
//     requires_action): the job looks the order up at once and, while the
//     payment stays pending, every pendingPace, using no attempt.
//   - an earlier attempt still in progress at the provider (409): the job
//     snoozes a second, and the next attempt replays that one's answer.
//   - over the provider's rate limit (429): the job snoozes for the
//     provider's Retry-After, using no attempt. That attempt charged
//     nothing; an earlier one's unknown outcome stays unknown, and the next
//     attempt under the same key replays it.
//   - transient failure: the error goes back to River, which retries on
//     NextRetry's schedule.
//   - after GiveUpAfter attempts, or once the order is too old to charge
//     under a key the provider still remembers (order.MayCharge), the
//     worker stops charging and asks the provider what it holds for the
//     order (order.Resolve): a charge → paid; none → payment_failed with
//     reason provider_unavailable. That "none" is only trusted once the
//     last attempt is LookupAfter old, so no attempt can still be in flight
//     at the provider. While the lookup fails too, the job keeps snoozing,
//     logged and counted as unresolved.
//
// An order therefore never fails while the provider holds a charge for it,
// and no charge is sent under a key the provider may have forgotten
// (docs/design.md, "Invariants").
type ChargeWorker struct {
	river.WorkerDefaults[order.ChargeArgs]

	db      *pgxpool.Pool
	payer   order.Payer
	policy  ChargePolicy
	log     *slog.Logger
	metrics *Metrics
}

// ChargePolicy is when the worker stops charging an order.
type ChargePolicy struct {
	// GiveUpAfter is the attempt from which the worker resolves the order
	// by lookup instead of charging it again.
	GiveUpAfter int
	// KeyRetention is how long the provider remembers an idempotency key
	// (PROVIDER_KEY_RETENTION).
	KeyRetention time.Duration
	// LookupAfter is how long after the last attempt began a lookup's "no
	// charge" is trusted: longer than the provider may take to finish a
	// request it received.
	LookupAfter time.Duration
}

// DefaultChargePolicy: 20 attempts on NextRetry's schedule span one to two
// hours; Stripe keeps keys 24 h; a provider finishes a request within a
// minute or not at all (the simulator's hang lasts 10 s by default).
func DefaultChargePolicy() ChargePolicy {
	return ChargePolicy{GiveUpAfter: 20, KeyRetention: 24 * time.Hour, LookupAfter: time.Minute}
}

// NewChargeWorker returns the worker River runs for charge_order jobs.
func NewChargeWorker(db *pgxpool.Pool, payer order.Payer, policy ChargePolicy, metrics *Metrics, log *slog.Logger) *ChargeWorker {
	return &ChargeWorker{db: db, payer: payer, policy: policy, metrics: metrics, log: log}
}

// Job outcomes, the values of the outcome label of checkout_charge_jobs_total.
const (
	jobPaid           = "paid"
	jobDeclined       = "declined"
	jobRejected       = "rejected"        // the provider refused the request itself (our bug)
	jobAlreadySettled = "already_settled" // the API settled the order first
	jobSnoozed        = "snoozed"         // breaker open, limit full, or over the provider's rate limit
	jobRetried        = "retried"         // a failure River retries
	jobResolved       = "resolved"        // settled paid from the provider's lookup
	jobExhausted      = "exhausted"       // failed: the lookup says the provider holds no charge
	jobUnresolved     = "unresolved"      // past giving up, and the lookup failed too: asked again later
	jobInterrupted    = "interrupted"     // shutdown cancelled the run; it runs again at once
)

// Timeout bounds one run of the job. The worker's policy makes a single
// attempt (River does the retrying), so the provider call takes at most the
// attempt timeout; 30 s leaves ample room for the short transactions even
// on a slow database, and RescueStuckJobsAfter must exceed it.
func (w *ChargeWorker) Timeout(*river.Job[order.ChargeArgs]) time.Duration { return ChargeJobTimeout }

// ChargeJobTimeout is the charge_order job timeout (see Timeout).
const ChargeJobTimeout = 30 * time.Second

// NextRetry spaces retries after transient failures: exponential from 1 s,
// capped at 10 min, with "equal jitter" (half fixed, half random) so jobs
// that failed together do not return together, yet never retry sooner than
// half the step. Up to the default GiveUpAfter of 20 the schedule spans one
// to two hours: 1, 2, 4 … 512 s (9–17 min in all), then nine retries 5–10
// min apart.
func (w *ChargeWorker) NextRetry(job *river.Job[order.ChargeArgs]) time.Time {
	return time.Now().Add(retryDelay(job.Attempt))
}

// retryCeiling is the longest wait between retries.
const retryCeiling = 10 * time.Minute

// inProgressPace is how soon a charge the provider reported in progress
// (409) is tried again, before snooze's jitter: the order is paid at most
// about this long after the provider finishes the attempt it holds. A 409
// costs the provider a key lookup, no charge.
const inProgressPace = 500 * time.Millisecond

// pendingPace is how often an order whose payment is pending at the
// provider (processing, or waiting for the customer to authenticate) is
// looked up again: a card payment leaves processing within seconds, and a
// lookup reads one window of the list.
const pendingPace = 10 * time.Second

// unresolvedPace is how often an order past giving up asks the provider's
// lookup again while the lookup fails. A lookup is a read that charges
// nothing, so once a minute is cheap, and an order then settles within a
// minute of the provider answering again (at the retry ceiling it could
// wait ten).
const unresolvedPace = time.Minute

func retryDelay(attempt int) time.Duration {
	const base, ceiling = time.Second, retryCeiling
	d := ceiling
	if attempt <= 10 {
		d = min(ceiling, base<<max(0, attempt-1))
	}
	return d/2 + rand.N(d/2+1)
}

// Work charges or resolves one order. It decides what River does with the
// job: past GiveUpAfter no error goes back to River, which would count it
// towards the job's attempt limit; the job of an unsettled order must never
// be discarded.
func (w *ChargeWorker) Work(ctx context.Context, job *river.Job[order.ChargeArgs]) error {
	err := w.work(ctx, job)
	var snooze *river.JobSnoozeError
	var cancel *river.JobCancelError
	switch {
	case err == nil, errors.As(err, &snooze), errors.As(err, &cancel):
		return err
	case errors.Is(ctx.Err(), context.Canceled):
		// Shutdown cancelled the run (StopAndCancel). River (≥ 0.44) makes
		// such a job available again at once, with its attempt restored and
		// no error recorded, so the next worker runs it without it counting
		// towards giving up (TestShutdownCancelledChargeIsAvailableAgain…).
		w.metrics.jobs.WithLabelValues(jobInterrupted).Inc()
		return err
	case job.Attempt < w.policy.GiveUpAfter:
		w.metrics.jobs.WithLabelValues(jobRetried).Inc()
		return err
	}
	w.log.ErrorContext(ctx, "order unresolved after giving up on charging it; asking the provider again later",
		"order_id", job.Args.OrderID, "attempts", job.Attempt, "err", err)
	w.metrics.jobs.WithLabelValues(jobUnresolved).Inc()
	return river.JobSnooze(unresolvedPace)
}

func (w *ChargeWorker) work(ctx context.Context, job *river.Job[order.ChargeArgs]) error {
	o, err := order.Get(ctx, w.db, job.Args.OrderID)
	if errors.Is(err, order.ErrNotFound) {
		// Jobs are only inserted for orders that exist, so this is
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
	if job.Attempt >= w.policy.GiveUpAfter || !order.MayCharge(o, w.policy.KeyRetention, time.Now()) {
		return w.resolve(ctx, job, o)
	}

	// Recorded before the call, so that a later lookup knows how long to
	// wait for this attempt to finish at the provider.
	marked, err := order.MarkAttempt(ctx, w.db, o.ID)
	if err != nil {
		return err
	}
	if !marked { // settled since it was loaded
		w.metrics.jobs.WithLabelValues(jobAlreadySettled).Inc()
		return nil
	}
	to, settled, err := order.Charge(ctx, w.payer, o)
	switch {
	case settled:
		outcome := jobPaid
		switch to.FailureReason {
		case order.ReasonCardDeclined:
			outcome = jobDeclined
		case order.ReasonProviderRejected:
			outcome = jobRejected
			w.log.ErrorContext(ctx, "payment provider rejected the charge request", "order_id", o.ID, "err", err)
		}
		return w.settle(ctx, job, o, to, outcome, order.Settle)
	case errors.Is(err, order.ErrRefused):
		return w.snooze(ctx, o, w.payer.RetryAfter())
	case errors.Is(err, order.ErrThrottled):
		return w.throttled(ctx, o, err)
	case errors.Is(err, order.ErrPending):
		// The provider holds the payment neither paid nor failed, and every
		// attempt under the key would replay that answer: ask the list for
		// the payment as it is now. No attempt is in flight — this one
		// came back with the payment — so no wait is needed first.
		return w.lookUp(ctx, job, o)
	case errors.Is(err, order.ErrInProgress):
		// An earlier attempt — the API's, given up on during an outage —
		// is still at the provider. Its answer is what this order waits
		// for, and the provider replays it as soon as it is done: ask again
		// in half a second, not on the backoff schedule, which would be 8 s and
		// more by the time a 10 s hang is over. No attempt is used; the
		// charge window (order.MayCharge) still bounds how long.
		return w.snooze(ctx, o, inProgressPace)
	}
	return fmt.Errorf("charge order %s, attempt %d: %w", o.ID, job.Attempt, err)
}

// resolve settles o from the provider's lookup instead of charging it.
func (w *ChargeWorker) resolve(ctx context.Context, job *river.Job[order.ChargeArgs], o order.Order) error {
	if wait := time.Until(o.LastAttemptAt.Add(w.policy.LookupAfter)); wait > 0 {
		// An attempt may still be in flight at the provider; a lookup now
		// could say "no charge" just before it lands.
		return river.JobSnooze(wait)
	}
	return w.lookUp(ctx, job, o)
}

// lookUp settles o from the provider's lookup; a payment still pending there
// is asked about again after pendingPace.
func (w *ChargeWorker) lookUp(ctx context.Context, job *river.Job[order.ChargeArgs], o order.Order) error {
	to, err := order.Resolve(ctx, w.payer, o, w.policy.LookupAfter)
	if errors.Is(err, order.ErrPending) {
		w.log.InfoContext(ctx, "payment pending at the provider; asking again later", "order_id", o.ID, "err", err)
		return w.snooze(ctx, o, pendingPace)
	}
	if errors.Is(err, order.ErrRefused) {
		return w.snooze(ctx, o, w.payer.RetryAfter())
	}
	if errors.Is(err, order.ErrThrottled) {
		return w.throttled(ctx, o, err)
	}
	if err != nil {
		return fmt.Errorf("look up charges of order %s: %w", o.ID, err)
	}
	outcome := jobResolved
	if to.Status == order.StatusPaymentFailed {
		outcome = jobExhausted
		w.log.ErrorContext(ctx, "order failed: the provider holds no charge for it after every attempt",
			"order_id", o.ID, "attempts", job.Attempt, "created_at", o.CreatedAt)
	}
	// A request that resumed the order after it was loaded may have a
	// charge on its way that the lookup did not see: then the lookup's
	// answer is not trusted, and the order is looked up again once that
	// attempt has had LookupAfter to land (SettleFromLookup).
	err = w.settle(ctx, job, o, to, outcome, order.SettleFromLookup)
	if errors.Is(err, errAttemptedMeanwhile) {
		w.metrics.jobs.WithLabelValues(jobSnoozed).Inc()
		return river.JobSnooze(w.policy.LookupAfter)
	}
	return err
}

// errAttemptedMeanwhile: a settle from a lookup found that a charge attempt
// began after the order was loaded.
var errAttemptedMeanwhile = errors.New("a charge attempt began after the lookup's order was loaded")

// snooze reschedules the job without using an attempt. The floor keeps a
// half-open breaker's rejected callers from spinning; the jitter spreads a
// backlog's jobs so the breaker's probes are not followed by a stampede.
func (w *ChargeWorker) snooze(ctx context.Context, o order.Order, wait time.Duration) error {
	wait = max(wait, 250*time.Millisecond)
	wait += rand.N(wait/2 + 1)
	w.metrics.jobs.WithLabelValues(jobSnoozed).Inc()
	w.log.DebugContext(ctx, "provider unavailable, snoozing charge", "order_id", o.ID, "snooze", wait)
	return river.JobSnooze(wait)
}

// throttled snoozes the job of a call the provider answered 429 for as long
// as its Retry-After asks, or the breaker's wait if that is longer: the
// provider is healthy but busy, and an attempt used on it would bring the
// lookup closer for nothing.
func (w *ChargeWorker) throttled(ctx context.Context, o order.Order, err error) error {
	wait, _ := order.RetryAfterOf(err)
	return w.snooze(ctx, o, max(wait, w.payer.RetryAfter()))
}

// settle moves the order to its final state with apply (order.Settle, or
// order.SettleFromLookup) and completes the job in one transaction.
func (w *ChargeWorker) settle(ctx context.Context, job *river.Job[order.ChargeArgs], base order.Order, to order.Settlement, outcome string,
	apply func(context.Context, order.Querier, order.Order, order.Settlement) (order.Order, bool, error)) error {
	err := pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
		o, changed, err := apply(ctx, tx, base, to)
		if err != nil {
			return err
		}
		if !changed && !o.Status.Terminal() {
			return errAttemptedMeanwhile
		}
		if !changed {
			outcome = jobAlreadySettled
		}
		if o.Status == order.StatusPaymentFailed && changed {
			w.metrics.failed.WithLabelValues(o.FailureReason).Inc()
		}
		_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
	if errors.Is(err, errAttemptedMeanwhile) {
		return err
	}
	if err != nil {
		return fmt.Errorf("settle order %s: %w", job.Args.OrderID, err)
	}
	w.metrics.jobs.WithLabelValues(outcome).Inc()
	return nil
}
