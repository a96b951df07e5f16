package resilience

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// State is a circuit breaker state.
type State uint8

// The states, numbered as gobreaker numbers them (and as the
// resilience_breaker_state gauge reports them).
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

// What a call reports to gobreaker. The caller's classifier has already
// judged the call's error, so gobreaker's callbacks only compare sentinels
// and never run caller code under gobreaker's lock.
var (
	errReportFailure  = errors.New("failure")
	errReportSlow     = errors.New("slow call")
	errReportExcluded = errors.New("excluded")
)

// breaker is gobreaker's two-step breaker plus the two rules it lacks: a
// count window judged by failure rate, and slow calls counted while they
// are still running.
type breaker struct {
	cb          *gobreaker.TwoStepCircuitBreaker[struct{}]
	slowAfter   time.Duration
	openFor     time.Duration // OpenDuration plus this instance's jitter
	minCalls    int
	failureRate float64
	slowRate    float64

	// win is only touched from gobreaker's callbacks (IsSuccessful,
	// ReadyToTrip, OnStateChange), which all run under gobreaker's mutex,
	// so it needs no lock of its own.
	win window
	// winStale asks record, under gobreaker's lock, to empty the window
	// before it counts the next outcome (see Policy.Release).
	winStale atomic.Bool

	// openUntil is when the open state ends, as an offset from epoch (a
	// monotonic reading); 0 once the breaker has closed. OnStateChange
	// writes it under gobreaker's lock; RetryAfter and refusesNow read it
	// without locks, hence the atomic.
	epoch     time.Time
	openUntil atomic.Int64

	// gate is the state a fleet coordinator imposed (see Imposed), nil
	// when the local breaker decides alone; the per-call path reads it
	// with one atomic load. events carries transitions and probe verdicts
	// to that coordinator.
	gate   atomic.Pointer[gate]
	events *eventQueue
	// demand counts calls asked of the breaker, admitted or not, so a
	// coordinator can tell a process with traffic from an idle one.
	demand atomic.Int64

	calls callCounters
	// limit hears of each call still in flight when it is late (see
	// limiter.lateAfter), at or before the slow threshold the slow-call rule
	// counts, so it can shrink before the call completes. Set once by New, before any call.
	limit       *limiter
	stateGauge  prometheus.Gauge
	transitions *prometheus.CounterVec
	imposed     *prometheus.CounterVec
	sourceGauge *prometheus.GaugeVec
	name        string
	log         *slog.Logger

	// pool recycles call trackers, timers included, so the closed path
	// does not allocate a timer per call.
	pool sync.Pool
}

func newBreaker(name string, cfg Config, m *Metrics, log *slog.Logger, rnd func(int64) int64) *breaker {
	b := &breaker{
		slowAfter:   cfg.SlowCallThreshold,
		openFor:     cfg.OpenDuration,
		minCalls:    cfg.MinCalls,
		failureRate: cfg.FailureRate,
		slowRate:    cfg.SlowCallRate,
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
	// gobreaker fixes the open duration per instance, so the jitter is per
	// instance too. That is what keeps replicas that opened together from
	// probing the recovering dependency in lockstep.
	if cfg.OpenJitter > 0 {
		b.openFor += time.Duration(rnd(int64(cfg.OpenJitter)))
	}
	b.pool.New = func() any {
		c := &call{b: b}
		c.timer = time.AfterFunc(time.Hour, c.onTimer)
		c.timer.Stop()
		return c
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: uint32(cfg.HalfOpenProbes),
		// Interval 0: gobreaker never clears its own counts while closed.
		// The count window does the forgetting, and ReadyToTrip ignores
		// gobreaker's counts.
		Interval:      0,
		Timeout:       b.openFor,
		ReadyToTrip:   func(gobreaker.Counts) bool { return b.win.tripped(b.minCalls, b.failureRate, b.slowRate) },
		OnStateChange: b.onStateChange,
		IsExcluded:    func(err error) bool { return errors.Is(err, errReportExcluded) },
		IsSuccessful:  b.record,
	})
	b.stateGauge.Set(float64(StateClosed))
	b.setSource(SourceLocal)
	m.breakerEffective.add(b)
	return b
}

// record adds a reported outcome to the count window. gobreaker calls it
// (as IsSuccessful) exactly once per outcome it counts, under its lock, and
// only after discarding outcomes of calls admitted before the last state
// change. Recording here keeps the window in step with gobreaker's
// generations: a hung call that finally returns after the breaker opened
// cannot pollute the next window.
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

// onStateChange runs under gobreaker's lock, so it must not call back into
// the breaker: it reads and resets the window (guarded by that same lock),
// records when the open state ends, and reports.
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
		slog.String("name", name),
		slog.String("from", from.String()),
		slog.String("to", to.String()),
		slog.Int("window_calls", cause.calls),
		slog.Int("window_failures", cause.failures),
		slog.Int("window_slow", cause.slow),
		slog.Duration("open_for", b.openFor),
	)
}

// state asks gobreaker, which also moves an expired open state to
// half-open.
func (b *breaker) state() State { return State(b.cb.State()) }

// effectiveState is the state calls meet: an imposed state while it holds
// (open for its open part, half-open while only the fleet's probes may
// pass), else the local breaker's, as allow decides.
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

// retryAfter is how long until the breaker lets a call through: what is
// left of an imposed state (its open part, or, while probes are out, until
// their answer is due, answerWithin after they went), or else of the local
// open state; 0 when neither refuses.
func (b *breaker) retryAfter(answerWithin time.Duration) time.Duration {
	now := b.now()
	if g := b.gate.Load(); g != nil && now < g.holdUntil {
		switch {
		case now < g.openUntil:
			return g.openUntil - now
		case g.probes == 0 || g.permits.Load() <= 0:
			// Probes are out, another process's or this one's: their
			// verdict comes within an attempt timeout and ends the
			// hold at once, so a caller told to wait the whole hold
			// would sleep through a recovery.
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

// allow asks gobreaker to admit a call. The tracker it returns must be
// finished exactly once (finish or reject).
//
// Before gobreaker, one atomic read: the state a fleet coordinator
// imposed. It touches no store.
func (b *breaker) allow() (*call, error) {
	b.demand.Add(1)
	var probe *gate
	if g := b.gate.Load(); g != nil {
		now := b.now()
		isProbe, err := g.admit(now)
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
	c := b.pool.Get().(*call)
	c.probe = probe
	c.done = done
	c.armed = false
	// The store publishes done to the timer goroutine, whose CAS reads it.
	c.state.Store(running)
	return c, nil
}

// refusesNow (L8) is the refusal a call admitted earlier would meet now, nil if
// none: a state the fleet imposed since (open, or half-open with the probes
// not this call's), or the local open state. The stack asks it once the
// call has its slot of the limit, whose wait may outlast the verdict.
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

// rejectedReason counts a refusal's reason only, for a call whose outcome
// its tracker counts, and returns it.
func (b *breaker) rejectedReason(err error) error {
	if errors.Is(err, ErrOpen) {
		b.calls.rejectedOpen.Inc()
	} else {
		b.calls.rejectedHalfOpen.Inc()
	}
	return err
}

// call tracks one admitted call so that its outcome reaches gobreaker, and
// the concurrency limit, exactly once each: from the call's timer while it
// is still in flight — the limit when it is late, the breaker when it
// passes the slow threshold — or from its completion, whichever comes
// first.
type call struct {
	b     *breaker
	done  func(error) // gobreaker's report callback for this call
	probe *gate       // non-nil: a probe for the fleet, whose verdict it reports
	// timer fires onTimer at lateAfter, then again at the slow threshold
	// if that is later.
	timer     *time.Timer
	lateAfter time.Duration
	armed     bool
	state     atomic.Uint32
}

// isProbe reports whether c is a probe — of the fleet's state, or of this
// breaker's half-open one (gobreaker's MaxRequests bounds how many it
// admits) — which may take the slot over a limit full of held calls
// (limiter.acquireProbe). Asked only when the limit is full of them, so
// the per-call path does not take gobreaker's lock a second time.
func (c *call) isProbe() bool {
	return c.probe != nil || c.b.cb.State() == gobreaker.StateHalfOpen
}

const (
	running      uint32 = iota
	finished            // completed before the breaker heard of it as slow
	reportedLate        // the limit heard of it as late; the breaker has not
	reportedSlow        // the breaker (and the limit) heard of it as slow
)

// startClock starts the call's timer. The stack calls it once the call
// holds a slot of the concurrency limit, so time spent queueing for a
// slot, which says nothing about the dependency, does not count.
func (c *call) startClock() {
	c.armed = true
	c.lateAfter = c.b.limit.lateAfter(c.b.slowAfter)
	c.timer.Reset(c.lateAfter)
}

// restartClock starts the call's timer again, as if it had just been
// sent, for the call that follows its probe in the same slot (see
// attempt). It reports false, and changes nothing, when the breaker has
// heard the probe as slow already: that is the verdict. A probe the limit
// heard as late is not one the breaker has judged, and the call is judged
// afresh. A timer firing at this very moment cannot be stopped: the call
// then goes on the probe's clock, judged a little early.
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

// onTimer runs on the timer's goroutine while the call is still in
// flight. Reporting now, rather than when the call returns, is what trips
// the breaker while hung calls are still holding connections (gobreaker
// counts a call only once it returns), and what shrinks the adaptive limit before a hung call has
// completed. A call late for the limit before it is slow for the breaker
// is reported in two steps.
func (c *call) onTimer() {
	// Read before the CAS: once it succeeds, finish may recycle c as soon
	// as the timer is re-armed, and the timer's own lock, which orders the
	// two, is invisible to the race detector.
	b, lateAfter, slowAfter := c.b, c.lateAfter, c.b.slowAfter
	if lateAfter < slowAfter && c.state.CompareAndSwap(running, reportedLate) {
		b.late()
		c.timer.Reset(slowAfter - lateAfter) // last: once re-armed, finish may recycle c
		return
	}
	limitHeard := c.state.Load() == reportedLate
	if !c.state.CompareAndSwap(running, reportedSlow) && !c.state.CompareAndSwap(reportedLate, reportedSlow) {
		return // the call finished first
	}
	b.calls.slow.Inc()
	c.done(errReportSlow)
	if c.probe != nil {
		b.probeDone(c.probe, probeFailed)
	}
	if !limitHeard {
		b.late()
	}
}

// late tells the limit that a call is late.
func (b *breaker) late() { b.limit.congested() }

// finish reports how the call ended to the breaker, unless onTimer already
// reported it as slow: then the result still goes back to the caller but
// the breaker hears nothing more. It returns whether the limit should hear
// the outcome: false when onTimer already told it the call was late or
// slow, so the caller does not tell it twice.
func (c *call) finish(report error, counter prometheus.Counter) bool {
	limitHeard := false
	switch {
	case c.state.CompareAndSwap(running, finished):
	case c.state.CompareAndSwap(reportedLate, finished):
		limitHeard = true
	default:
		return false
	}
	// Recycle only when the timer provably will not fire: if Stop is too
	// late, onTimer may still be running and reading c.
	recycle := !c.armed || c.timer.Stop()
	counter.Inc()
	c.done(report)
	if g := c.probe; g != nil {
		switch {
		case report == nil:
			c.b.probeDone(g, probeSucceeded)
		case errors.Is(report, errReportExcluded):
			c.b.probeDone(g, probeExcluded)
		default:
			c.b.probeDone(g, probeFailed)
		}
	}
	if recycle {
		c.done = nil
		c.probe = nil
		c.b.pool.Put(c)
	}
	return !limitHeard
}
