package idempotency

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
)

// MinRetention is how long keys are kept at least: the draft's advice and
// the promise to clients (docs/lifecycle.md, "Timers and bounds"), who may retry a request for a day.
const MinRetention = 24 * time.Hour

// PruneArgs is the periodic job that deletes keys past retention.
type PruneArgs struct{}

// Kind is the job kind River stores and routes by.
func (PruneArgs) Kind() string { return "prune_idempotency_keys" }

// PruneWorker deletes expired keys in batches, so a large backlog (after a
// long pause of the worker, say) never becomes one long-locking DELETE.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	db        Execer
	retention time.Duration
	log       *slog.Logger
}

// NewPruneWorker returns the worker; retention below MinRetention is raised to it.
func NewPruneWorker(db Execer, retention time.Duration, log *slog.Logger) *PruneWorker {
	return &PruneWorker{db: db, retention: max(retention, MinRetention), log: log}
}

const pruneBatch = 1000

// Work deletes every key older than the retention period.
func (w *PruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	var total int64
	for {
		n, err := DeleteExpired(ctx, w.db, w.retention, pruneBatch)
		if err != nil {
			return err
		}
		total += n
		if n < pruneBatch {
			break
		}
	}
	w.log.InfoContext(ctx, "pruned idempotency keys", "deleted", total, "older_than", w.retention)
	return nil
}

// PeriodicPrune schedules the prune job every interval, and once at start.
func PeriodicPrune(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{}, nil },
		&river.PeriodicJobOpts{ID: "prune_idempotency_keys", RunOnStart: true})
}
