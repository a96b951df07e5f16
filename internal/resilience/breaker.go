package resilience

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// State is a breaker state, numbered as in gobreaker and resilience_breaker_state.
type State uint8

const (
	StateClosed   = State(gobreaker.StateClosed)
	StateHalfOpen = State(gobreaker.StateHalfOpen)
	StateOpen     = State(gobreaker.StateOpen)
)

func (s State) String() string { return gobreaker.State(s).String() }

var (
	// ErrOpen means the breaker is open and refused the call without making
	// it. Policy.RetryAfter says when it will let a probe through.
	ErrOpen = errors.New("resilience: circuit breaker is open")
	// ErrTooManyRequests means the breaker is half-open and all its probes
	// are in flight, so it refused the call without making it.
	ErrTooManyRequests = errors.New("resilience: circuit breaker is half-open and its probes are in flight")
)

// What a call reports to gobreaker: the classifier has judged the error
// already, so gobreaker's callbacks never run caller code under its lock.
var (
	errReportFailure  = errors.New("failure")
	errReportSlow     = errors.New("slow call")
	errReportExcluded = errors.New("excluded")
)

// breaker is gobreaker's two-step breaker plus a count window and an in-flight slow rule.
type breaker struct {
	cb        *gobreaker.TwoStepCircuitBreaker[struct{}]
	slowAfter time.Duration
	openFor   time.Duration // with this instance's jitter: gobreaker fixes it per instance

	// win is touched only from gobreaker's callbacks, under its mutex, so it
	// needs no lock of its own; winStale asks record to empty it first
	// (Policy.Release).
	win      window
	winStale atomic.Bool
	// era counts imposed states: see call.report.
	era atomic.Uint64

	// openUntil is when the open state ends, a monotonic offset from epoch;
	// 0 once closed. Written under gobreaker's lock, read without one.
	epoch     time.Time
	openUntil atomic.Int64

	gate   atomic.Pointer[gate] // the state a fleet coordinator imposed; nil: the local breaker decides
	events *eventQueue          // transitions and probe verdicts, for that coordinator
	demand atomic.Int64         // calls asked of the breaker, admitted or not (Policy.Demand)

	calls       callCounters
	limit       *limiter // hears of a call in flight when it is late; set once by New
	stateGauge  prometheus.Gauge
	transitions *prometheus.CounterVec
	imposed     *prometheus.CounterVec
	sourceGauge *prometheus.GaugeVec
	name        string
	log         *slog.Logger
}

func newBreaker(name string, cfg Config, m *Metrics, log *slog.Logger, rnd func(int64) int64) *breaker {
	b := &breaker{
		slowAfter:   cfg.SlowCallThreshold,
		openFor:     cfg.BreakDuration(rnd),
		win:         newWindow(cfg.WindowSize),
		epoch:       time.Now(),
		calls:       m.callCounters(name),
		stateGauge:  m.breakerState.WithLabelValues(name),
		transitions: m.breakerTransitions,
		imposed:     m.breakerImposed,
		sourceGauge: m.breakerSource,
		events:      newEventQueue(),
		name:        name,
		log:         log,
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: uint32(cfg.HalfOpenProbes),
		// 0: gobreaker never clears its counts, which ReadyToTrip ignores.
		Interval:      0,
		Timeout:       b.openFor,
		ReadyToTrip:   func(gobreaker.Counts) bool { return b.win.tripped(cfg.MinCalls, cfg.FailureRate, cfg.SlowCallRate) },
		OnStateChange: b.onStateChange,
		IsExcluded:    func(err error) bool { return errors.Is(err, errReportExcluded) },
		IsSuccessful:  b.record,
	})
	b.stateGauge.Set(float64(StateClosed))
	b.setSource(SourceLocal)
	m.breakerEffective.add(b)
	return b
}

// record adds a reported outcome to the window. gobreaker calls it, under
// its lock, only for calls admitted since the last state change, so a hung
// call that returns after the breaker opened cannot pollute the next window.
func (b *breaker) record(err error) bool {
	if b.winStale.CompareAndSwap(true, false) {
		b.win.reset()
	}
	switch {
	case err == nil:
		b.win.add(succeeded)
		return true
	case errors.Is(err, errReportSlow):
		b.win.add(slow)
	default:
		b.win.add(failed)
	}
	return false
}

// onStateChange runs under gobreaker's lock: it must not call the breaker.
func (b *breaker) onStateChange(name string, from, to gobreaker.State) {
	now := time.Now()
	cause := b.win
	b.win.reset()
	switch to {
	case gobreaker.StateOpen:
		b.openUntil.Store(int64(now.Sub(b.epoch) + b.openFor))
		b.events.push(Event{Kind: EventOpened, At: now, OpenFor: b.openFor})
	case gobreaker.StateClosed:
		b.openUntil.Store(0)
	}
	b.stateGauge.Set(float64(to))
	b.transitions.WithLabelValues(name, from.String(), to.String()).Inc()
	level := slog.LevelInfo
	if to == gobreaker.StateOpen {
		level = slog.LevelWarn
	}
	b.log.LogAttrs(context.Background(), level, "circuit breaker state changed",
		slog.String("name", name), slog.String("from", from.String()), slog.String("to", to.String()),
		slog.Int("window_calls", cause.calls), slog.Int("window_failures", cause.failures),
		slog.Int("window_slow", cause.slow), slog.Duration("open_for", b.openFor))
}

// state asks gobreaker, which also moves an expired open state on.
func (b *breaker) state() State { return State(b.cb.State()) }

// effectiveState is the state calls meet: an imposed state while it holds
// (half-open while only the fleet's probes may pass), else the local one.
func (b *breaker) effectiveState() State {
	if g := b.gate.Load(); g != nil {
		switch now := b.now(); {
		case now < g.openUntil:
			return StateOpen
		case now < g.holdUntil:
			return StateHalfOpen
		}
	}
	return b.state()
}

// retryAfter is what is left of an imposed or the local open state, if any.
func (b *breaker) retryAfter(answerWithin time.Duration) time.Duration {
	now := b.now()
	if g := b.gate.Load(); g != nil && now < g.holdUntil {
		switch {
		case now < g.openUntil:
			return g.openUntil - now
		case g.probes == 0 || g.permits.Load() <= 0:
			// Probes are out: their verdict, due within answerWithin, ends
			// the hold, and a caller waiting it out would miss a recovery.
			return min(g.holdUntil-now, answerWithin)
		}
		return 0 // this process probes for the fleet
	}
	until := b.openUntil.Load()
	if until == 0 {
		return 0
	}
	return max(time.Duration(until)-now, 0)
}

// allow asks the imposed state, then gobreaker, to admit a call; finish its tracker once.
func (b *breaker) allow() (*call, error) {
	b.demand.Add(1)
	era := b.era.Load() // before the gate: impose swaps the gate, then bumps the era
	var probe *gate
	if g := b.gate.Load(); g != nil {
		isProbe, err := g.admit(b.now())
		if err != nil {
			return nil, b.rejected(err)
		}
		if isProbe {
			probe = g
		}
	}
	done, err := b.cb.Allow()
	if err != nil {
		if probe != nil {
			probe.permits.Add(1) // not a verdict: the local breaker refused it
		}
		if errors.Is(err, gobreaker.ErrOpenState) {
			return nil, b.rejected(ErrOpen)
		}
		return nil, b.rejected(ErrTooManyRequests)
	}
	c := &call{b: b, probe: probe, era: era, done: done}
	c.timer = time.AfterFunc(time.Hour, c.onTimer) // created stopped: startClock arms it
	c.timer.Stop()
	return c, nil
}

// refusesNow (L8) is the refusal a call admitted earlier would meet now, if
// any: the wait for its slot may outlast the verdict it was admitted under.
func (b *breaker) refusesNow(c *call) error {
	now := b.now()
	if g := b.gate.Load(); g != nil && c.probe != g && now < g.holdUntil {
		if now < g.openUntil {
			return ErrOpen
		}
		return ErrTooManyRequests
	}
	if until := b.openUntil.Load(); until != 0 && c.probe == nil && now < time.Duration(until) {
		return ErrOpen
	}
	return nil
}

// rejected counts a refusal and returns it.
func (b *breaker) rejected(err error) error {
	b.calls.rejected.Inc()
	return b.rejectedReason(err)
}

// rejectedReason counts only the reason, for a call its tracker counts.
func (b *breaker) rejectedReason(err error) error {
	if errors.Is(err, ErrOpen) {
		b.calls.rejectedOpen.Inc()
	} else {
		b.calls.rejectedHalfOpen.Inc()
	}
	return err
}

// call tracks one admitted call so that its outcome reaches gobreaker and
// the limit once each: from its timer while in flight (late, then slow) or
// from its completion, whichever comes first.
type call struct {
	b         *breaker
	done      func(error) // gobreaker's report callback for this call
	probe     *gate       // non-nil: a probe for the fleet, whose verdict it reports
	era       uint64      // breaker.era when admitted
	timer     *time.Timer // fires onTimer at lateAfter, then at the slow threshold if later
	lateAfter time.Duration
	state     atomic.Uint32
}

// isProbe reports whether c probes the fleet's state or a half-open breaker;
// asked only over held slots (limiter.acquireProbe): it takes gobreaker's lock.
func (c *call) isProbe() bool {
	return c.probe != nil || c.b.cb.State() == gobreaker.StateHalfOpen
}

// report tells gobreaker how the call ended, as gobreaker ignores a call
// from before its own last state change: excluded, if a state was imposed since.
func (c *call) report(err error) {
	if c.era != c.b.era.Load() {
		err = errReportExcluded
	}
	c.done(err)
}

const (
	running      uint32 = iota
	finished            // completed before the breaker heard of it as slow
	reportedLate        // the limit heard of it as late; the breaker has not
	reportedSlow        // the breaker (and the limit) heard of it as slow
)

// startClock starts the timer once the call holds its slot: its queueing is ours.
func (c *call) startClock() {
	c.lateAfter = c.b.limit.lateAfter(c.b.slowAfter)
	c.timer.Reset(c.lateAfter)
}

// restartClock starts the timer again for the call after its probe
// (Policy.probeFirst), and reports false, changing nothing, if the breaker
// heard the probe as slow: that is the verdict. A timer firing this very
// moment cannot be stopped: the call then goes on the probe's clock.
func (c *call) restartClock() bool {
	if c.state.Load() == reportedSlow {
		return false
	}
	if !c.timer.Stop() {
		return true
	}
	// Stopped while pending, the timer's last run (if any) is over.
	c.state.CompareAndSwap(reportedLate, running)
	c.startClock()
	return true
}

// onTimer runs on the timer's goroutine while the call is in flight:
// reporting now, not when it returns, trips the breaker and shrinks the
// limit while hung calls still hold their connections.
func (c *call) onTimer() {
	b, late := c.b, c.lateAfter // before the CAS: after it, restartClock may set lateAfter
	if late < b.slowAfter && c.state.CompareAndSwap(running, reportedLate) {
		b.limit.congested()
		c.timer.Reset(b.slowAfter - late)
		return
	}
	limitHeard := c.state.Load() == reportedLate
	if !c.state.CompareAndSwap(running, reportedSlow) && !c.state.CompareAndSwap(reportedLate, reportedSlow) {
		return // the call finished first
	}
	b.calls.slow.Inc()
	c.report(errReportSlow)
	if c.probe != nil {
		b.probeDone(c.probe, errReportSlow)
	}
	if !limitHeard {
		b.limit.congested()
	}
}

// finish reports how the call ended to the breaker, unless onTimer reported
// it slow, and returns whether the limit should hear it: not if onTimer did.
func (c *call) finish(report error, counter prometheus.Counter) bool {
	limitHeard := false
	switch {
	case c.state.CompareAndSwap(running, finished):
	case c.state.CompareAndSwap(reportedLate, finished):
		limitHeard = true
	default:
		return false
	}
	c.timer.Stop() // if it fires anyway, its CAS fails: the call is over
	counter.Inc()
	c.report(report)
	if c.probe != nil {
		c.b.probeDone(c.probe, report)
	}
	return !limitHeard
}
