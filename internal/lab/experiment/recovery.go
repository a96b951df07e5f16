package experiment

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Recovery is what happened once the fault ended (docs/design.md, "After an outage"): how
// many charges were sent into the fault, whether live orders were charged at once again, how
// long the backlog of deferred orders took to be paid against the least it could take, and
// whether the provider was kept within its capacity while it was.
type Recovery struct {
	// ChargesDuringFault counts the charge requests the provider received while the fault
	// was active (all of them answered 503 in a down fault; held for the fault's latency
	// in a latency fault).
	ChargesDuringFault int `json:"charges_during_fault"`
	// LookupsDuringFault counts the reads (lookups, list walks) it received meanwhile:
	// questions that charge nothing, such as the probe sent before a charge over a limit
	// full of held calls.
	LookupsDuringFault int `json:"lookups_during_fault"`
	// LiveAfter: orders sent this long after the fault ended count as live; Live of them
	// were sent, LiveCharged answered 201.
	LiveAfter   Millis `json:"live_after_ms"`
	Live        int    `json:"live"`
	LiveCharged int    `json:"live_charged"`
	// Backlog counts the orders answered 202 before the fault ended: deferred to the worker.
	Backlog int `json:"backlog"`
	// BacklogPaid is when the last of them was paid, LastPaid when the last acknowledged
	// order of the run was, both from the end of the fault: 0 when that was before its end,
	// NeverPaid when one never was.
	BacklogPaid Millis `json:"backlog_paid_ms"`
	LastPaid    Millis `json:"last_paid_ms"`
	// IdealDrain is the least time the backlog could take: Backlog / (Capacity /
	// ProviderLatency − the live rate), the provider's surplus once live orders have their
	// share; 0 when the capacity or the latency is not known.
	IdealDrain      Millis `json:"ideal_drain_ms"`
	Capacity        int    `json:"capacity"`
	ProviderLatency Millis `json:"provider_latency_ms"`
	// ChargesProcessed counts the charges the provider processed during the run and its
	// drain, ChargesOverCapacity those that began above its capacity.
	ChargesProcessed    int `json:"charges_processed"`
	ChargesOverCapacity int `json:"charges_over_capacity"`
	// WorkerPollErrors counts the readings of the workers' /metrics that failed, when they
	// were sampled (Config.WorkerURL); the seconds hold those that succeeded. A reading counts
	// the slots taken (resilience_bulkhead_in_use): the calls in flight and the slots kept for
	// calls given up on.
	WorkerPollErrors int `json:"worker_poll_errors,omitempty"`
	// Seconds is the run second by second, the drain included.
	Seconds []Second `json:"seconds"`
}

// Second is one second of a run: charges the provider began processing, how many of them
// began above its capacity, the most it had in flight, and the run's unsettled orders at
// the end of the second. Where the workers were sampled, WorkerReadings counts the readings
// of the second that succeeded, WorkerLimit is the highest of their payment limits summed at
// one of them, and WorkerSlots the most slots of those limits taken at one — calls in flight
// and slots kept for calls given up on: what of the provider's in-flight was the backlog's.
type Second struct {
	At             Millis `json:"at_ms"`
	Started        int    `json:"started"`
	OverCapacity   int    `json:"over_capacity"`
	InFlight       int    `json:"in_flight_max"`
	Backlog        int    `json:"backlog"`
	WorkerReadings int    `json:"worker_readings,omitempty"`
	WorkerLimit    int    `json:"worker_limit,omitempty"`
	WorkerSlots    int    `json:"worker_slots_max,omitempty"`
}

// NeverPaid is Recovery.BacklogPaid or LastPaid when an order never was: -1 ms, which a
// report's JSON keeps (it rounds to the microsecond).
const NeverPaid = Millis(-time.Millisecond)

// LiveShare is the share of live orders answered 201, 1 when none was sent.
func (r Recovery) LiveShare() float64 {
	if r.Live == 0 {
		return 1
	}
	return float64(r.LiveCharged) / float64(r.Live)
}

// WorkersAfter returns the range of the workers' limits (Second.WorkerLimit: the highest
// each second) and the most of their slots taken, over the whole seconds after the fault of
// scenario ended; ok is false when no reading of the workers succeeded then.
func (r Recovery) WorkersAfter(scenario Scenario) (lo, hi, slots int, ok bool) {
	end := scenario.active().end()
	from := Millis(end.Truncate(time.Second))
	if time.Duration(from) < end {
		from += Millis(time.Second)
	}
	for _, s := range r.Seconds {
		if s.At < from || s.WorkerReadings == 0 {
			continue
		}
		if !ok {
			lo, hi, ok = s.WorkerLimit, s.WorkerLimit, true
		}
		lo, hi, slots = min(lo, s.WorkerLimit), max(hi, s.WorkerLimit), max(slots, s.WorkerSlots)
	}
	return lo, hi, slots, ok
}

// workersSampled reports whether any reading of the workers succeeded.
func (r Recovery) workersSampled() bool {
	return slices.ContainsFunc(r.Seconds, func(s Second) bool { return s.WorkerReadings > 0 })
}

// OverCapacityShare is the share of charges that began above the provider's capacity.
func (r Recovery) OverCapacityShare() float64 {
	if r.ChargesProcessed == 0 {
		return 0
	}
	return float64(r.ChargesOverCapacity) / float64(r.ChargesProcessed)
}

// recoveryPoll is how often the watch reads the provider's stats and the run's orders.
const recoveryPoll = 250 * time.Millisecond

// recoveryWatch samples the provider and the run's unsettled orders during a run and its
// drain, on a connection of its own.
type recoveryWatch struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	seconds []Second
	err     error
	// workerErrors counts the workers' readings that failed.
	workerErrors int
}

// workerPolicy is the name of the worker's policy for the payment provider (cmd/worker),
// checkout's being "payment".
const workerPolicy = "payment-worker"

// workerReading is the workers' payment limits and the slots of them taken, summed.
type workerReading struct {
	limit, slots int
}

func watchRecovery(ctx context.Context, cfg Config, sim *simulator, customerID string, start time.Time) *recoveryWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &recoveryWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		db, err := pgx.Connect(ctx, cfg.DatabaseURL)
		if err != nil {
			w.fail(fmt.Errorf("recovery watch: connect: %w", err))
			return
		}
		defer db.Close(context.WithoutCancel(ctx))
		tick := time.NewTicker(recoveryPoll)
		defer tick.Stop()
		client := &http.Client{Timeout: recoveryPoll}
		processed, over := -1, 0
		for {
			// The readings take time, the workers' up to recoveryPoll each: they are
			// stamped when they began.
			at := time.Since(start)
			st, err := sim.stats(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				w.fail(err)
				return
			}
			var backlog int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE customer_id = $1 AND status IN ('pending', 'pending_payment')`,
				customerID).Scan(&backlog); err != nil {
				if ctx.Err() != nil {
					return
				}
				w.fail(fmt.Errorf("recovery watch: %w", err))
				return
			}
			started, above := 0, 0
			if processed >= 0 {
				started, above = st.ChargesProcessed-processed, st.ChargesOverCapacity-over
			}
			processed, over = st.ChargesProcessed, st.ChargesOverCapacity
			var workers *workerReading
			if urls := cfg.workers(); len(urls) > 0 {
				workers = w.readWorkers(ctx, client, urls, workerPolicy)
			}
			w.add(at, started, above, st.InFlight, backlog, workers)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// readWorkers sums the workers' limits and slots taken for policy, nil when one of them
// could not be read: a worker busy draining may answer late, which is counted rather than
// ending the run (a read cut short by the watch's end is not counted).
func (w *recoveryWatch) readWorkers(ctx context.Context, client *http.Client, urls []string, policy string) *workerReading {
	var sum workerReading
	for _, u := range urls {
		r, err := readMetrics(ctx, client, u+"/metrics", policy)
		if err == nil && !r.limitFound {
			err = fmt.Errorf("%s/metrics exports no %s limit", u, policy)
		}
		if err != nil {
			if ctx.Err() == nil {
				w.mu.Lock()
				w.workerErrors++
				w.mu.Unlock()
			}
			return nil
		}
		sum.limit += r.limit
		sum.slots += r.inFlight
	}
	return &sum
}

func (w *recoveryWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
}

// add folds one reading into its second; workers is nil when they were not read.
func (w *recoveryWatch) add(at time.Duration, started, above, inFlight, backlog int, workers *workerReading) {
	if at < 0 {
		return
	}
	sec := Millis(at.Truncate(time.Second))
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.seconds); n == 0 || w.seconds[n-1].At != sec {
		w.seconds = append(w.seconds, Second{At: sec})
	}
	s := &w.seconds[len(w.seconds)-1]
	s.Started += started
	s.OverCapacity += above
	s.InFlight = max(s.InFlight, inFlight)
	s.Backlog = backlog
	if workers != nil {
		s.WorkerReadings++
		s.WorkerLimit = max(s.WorkerLimit, workers.limit)
		s.WorkerSlots = max(s.WorkerSlots, workers.slots)
	}
}

// stop ends the sampling and returns its result.
func (w *recoveryWatch) stop() (seconds []Second, workerErrors int, err error) {
	w.cancel()
	<-w.done
	return w.result()
}

// result returns the seconds and the workers' readings that failed.
func (w *recoveryWatch) result() (seconds []Second, workerErrors int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seconds, w.workerErrors, w.err
}

// measureRecovery works out the Recovery of a drained run from its samples, Postgres and
// the provider's stats.
func measureRecovery(ctx context.Context, db *pgx.Conn, sim *simulator, cfg Config, start time.Time, samples []Sample, seconds []Second) (Recovery, error) {
	end := cfg.active().end()
	r := Recovery{LiveAfter: Millis(cfg.LiveAfter), Seconds: seconds, ProviderLatency: Millis(cfg.ProviderLatency)}
	var backlog, acked []string
	for _, s := range samples {
		if s.Probe != ProbeCheckout {
			continue
		}
		at := time.Duration(s.At)
		if at >= end+cfg.LiveAfter {
			r.Live++
			if s.Outcome == "201" {
				r.LiveCharged++
			}
		}
		if s.OrderID == "" {
			continue
		}
		acked = append(acked, s.OrderID)
		if s.Outcome == "202" && at < end {
			backlog = append(backlog, s.OrderID)
		}
	}
	r.Backlog = len(backlog)
	faultEnd := start.Add(end)
	lastPaid := func(ids []string) (Millis, error) {
		if len(ids) == 0 {
			return 0, nil
		}
		var last *time.Time
		var unpaid int
		err := db.QueryRow(ctx, `
			SELECT max(updated_at) FILTER (WHERE status = 'paid'), count(*) FILTER (WHERE status <> 'paid')
			FROM orders WHERE id::text = ANY($1)`, ids).Scan(&last, &unpaid)
		if err != nil {
			return 0, fmt.Errorf("recovery: %w", err)
		}
		if last == nil || unpaid > 0 {
			return NeverPaid, nil
		}
		return Millis(max(last.Sub(faultEnd), 0)), nil
	}
	var err error
	if r.BacklogPaid, err = lastPaid(backlog); err != nil {
		return Recovery{}, err
	}
	if r.LastPaid, err = lastPaid(acked); err != nil {
		return Recovery{}, err
	}
	st, err := sim.stats(ctx)
	if err != nil {
		return Recovery{}, err
	}
	r.ChargesDuringFault, r.LookupsDuringFault, r.ChargesProcessed, r.ChargesOverCapacity, r.Capacity =
		st.ChargesDuringFault, st.LookupsDuringFault, st.ChargesProcessed, st.ChargesOverCapacity, st.Capacity
	if r.Capacity > 0 && cfg.ProviderLatency > 0 {
		surplus := float64(r.Capacity)/cfg.ProviderLatency.Seconds() - cfg.liveRate()
		if surplus > 0 {
			r.IdealDrain = Millis(time.Duration(float64(r.Backlog) / surplus * float64(time.Second)))
		}
	}
	return r, nil
}
