package order

import (
	"github.com/google/uuid"
	"github.com/riverqueue/river"
)

// QueuePayments is the River queue the worker charges orders from.
const QueuePayments = "payments"

// ChargeArgs is the charge_order job: "make sure this order ends up charged
// or failed". It is inserted in the same transaction as the order, so every
// order that exists has a job that will settle it — even if the process
// that created it dies a moment later.
type ChargeArgs struct {
	OrderID uuid.UUID `json:"order_id"`
}

// Kind is the job kind River stores and routes by.
func (ChargeArgs) Kind() string { return "charge_order" }

// MaxChargeAttempts bounds how often the worker retries a charge that failed
// with a transient provider error (snoozes while the breaker is open do not
// count). With the worker's backoff schedule this spans about a day; see
// internal/order/worker.go.
const MaxChargeAttempts = 20

// InsertOpts makes the job unique per order: however often the API or a
// resumed request inserts it, one order has one live charge job.
func (ChargeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       QueuePayments,
		MaxAttempts: MaxChargeAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true},
	}
}

// The settling batch retires or reschedules the order's charge job with the
// two statements below instead of River's JobDeleteTx (and River has no
// "reschedule"): River's calls each need a round trip of their own inside
// an explicit transaction, while these ride in the settling batch — one
// round trip, one implicit transaction — which is what keeps the happy path
// at a few database round trips (see BenchmarkPlaceOrder). They touch only
// the documented core of River's river_job table (id, state, scheduled_at)
// and, like JobDeleteTx, never a running job: a worker that already holds
// the job finds the order settled and completes it.
const (
	retireJobSQL = `DELETE FROM river_job
		WHERE id = $1 AND state IN ('available', 'scheduled', 'retryable')`
	rescheduleJobSQL = `UPDATE river_job SET state = 'scheduled', scheduled_at = $2
		WHERE id = $1 AND state IN ('available', 'scheduled', 'retryable')`
)
