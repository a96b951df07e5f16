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
