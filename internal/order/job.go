package order

import (
	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// QueuePayments is the River queue the worker charges orders from.
const QueuePayments = "payments"

// ChargeArgs is the charge_order job: "make sure this order ends up charged
// or failed". The checkout flow inserts it, with River's InsertTx, in the
// transaction that defers an order (pending_payment); the worker's sweep
// inserts it for a pending order whose placing request died. Paid and
// declined orders never get one.
type ChargeArgs struct {
	OrderID uuid.UUID `json:"order_id"`
}

// Kind is the job kind River stores and routes by.
func (ChargeArgs) Kind() string { return "charge_order" }

// JobMaxAttempts is River's attempt limit for a charge job, set far above
// the worker's own give-up rule (internal/worker) so that River never
// discards the job of an unsettled order by itself: River's rescuer discards
// a job whose worker died during an attempt numbered max_attempts, and
// snoozes (breaker open, the lookups after giving up) do not use attempts,
// so a job reaches this only if workers die on it this many times.
const JobMaxAttempts = 100

// InsertOpts makes the job unique per order among live jobs: however often
// it is inserted (the API's fallback, the sweep, the reconciler), one order
// has one live charge job, while an order whose job was discarded or
// cancelled can get a new one.
func (ChargeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       QueuePayments,
		MaxAttempts: JobMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: liveJobStates},
	}
}

// liveJobStates are the states of a job that will still run.
var liveJobStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
	rivertype.JobStateRunning, rivertype.JobStateScheduled,
}

// liveJobStateNames is liveJobStates as plain strings, for SQL parameters:
// pgx cannot encode a slice of a named string type without asking the
// server for the parameter's type first, which the query exec modes used
// behind PgBouncer (exec, simple_protocol) never do.
var liveJobStateNames = func() []string {
	names := make([]string, len(liveJobStates))
	for i, s := range liveJobStates {
		names[i] = string(s)
	}
	return names
}()
