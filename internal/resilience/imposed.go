package resilience

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Source says who decides whether a breaker lets calls through.
type Source uint8

const (
	// SourceLocal: the process's own breaker (the zero value).
	SourceLocal Source = iota
	// SourceFleet: a coordinator shares another process's breaker state
	// (internal/fleet): open until the same moment everywhere, or half-open
	// with the probes admitted for the whole fleet.
	SourceFleet
	// SourceForced: an operator forced the dependency open.
	SourceForced
)

var sourceNames = [...]string{SourceLocal: "local", SourceFleet: "fleet", SourceForced: "forced"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}

// Imposed is a breaker state set from outside the process, by a coordinator
// that shares one dependency's breaker across processes. It is relative to
// the moment it is imposed, so the coordinator converts deadlines it reads
// from a shared store (whose clock is not ours) into durations first.
//
// Over its lifetime an imposed state refuses every call with [ErrOpen] for
// OpenFor; then, until HoldFor has passed, either admits Probes calls as the
// fleet's probes (Probes > 0: this process probes for everyone) or refuses
// every call with [ErrTooManyRequests] (another process probes, the
// verdict is pending). Once HoldFor has passed, the process's own breaker
// decides again, whatever the coordinator does or fails to do: a lost
// message or an unreachable store cannot keep a breaker open forever.
type Imposed struct {
	Source  Source // SourceFleet or SourceForced
	OpenFor time.Duration
	HoldFor time.Duration // not less than OpenFor
	Probes  int
}

// EventKind says what an [Event] reports.
type EventKind uint8

const (
	// EventOpened: the local breaker opened, for OpenFor.
	EventOpened EventKind = iota + 1
	// EventProbeSucceeded: every probe of an imposed state with Probes > 0
	// succeeded. The policy has already released the imposed state.
	EventProbeSucceeded
	// EventProbeFailed: a probe of an imposed state failed (an error that
	// counts against the breaker, a timeout, or a slow call). The policy
	// keeps refusing calls until the coordinator imposes the next state or
	// the hold ends.
	EventProbeFailed
)

func (k EventKind) String() string {
	switch k {
	case EventOpened:
		return "opened"
	case EventProbeSucceeded:
		return "probe_succeeded"
	case EventProbeFailed:
		return "probe_failed"
	}
	return "unknown"
}

// Event is something a coordinator must hear: a local transition to open,
// or the verdict of the fleet's probes.
type Event struct {
	Kind    EventKind
	At      time.Time
	OpenFor time.Duration // EventOpened: how long the local breaker stays open
}

// Events returns a channel that receives a value whenever events are
// waiting; TakeEvents returns them. The breaker reports transitions under
// gobreaker's lock and probe verdicts from its slow-call timer, where it
// must neither block nor call back into the breaker, so it only queues the
// event and wakes the channel (capacity 1) without blocking.
func (p *Policy) Events() <-chan struct{} { return p.events.wake }

// TakeEvents returns the events queued since the last call, oldest first.
func (p *Policy) TakeEvents() []Event { return p.events.take() }

// Impose sets the breaker's state from outside, replacing any state imposed
// before. Outside ModeProtected it does nothing.
func (p *Policy) Impose(im Imposed) {
	if p.breaker == nil {
		return
	}
	p.breaker.impose(im)
}

// Release gives the decision back to the local breaker: the fleet's probe
// found the dependency answering, or an operator cleared a forced state.
// Either is newer than what this process saw before the imposed state, so
// the local count window starts afresh — the calls that hung before it
// (failures and slow calls in the window) would otherwise open the local
// breaker again with the next few — and a limit full of slots held for
// calls abandoned in the hang makes room for one call beside them, as
// for a fast answer of its own (limiter.recovered).
func (p *Policy) Release() {
	if p.breaker == nil {
		return
	}
	if p.breaker.release() {
		p.limit.recovered()
	}
}

// Source returns who decides right now: SourceLocal unless an imposed state
// is still within its hold.
func (p *Policy) Source() Source {
	if p.breaker == nil {
		return SourceLocal
	}
	if g := p.breaker.gate.Load(); g != nil && p.breaker.now() < g.holdUntil {
		return g.source
	}
	return SourceLocal
}

// Demand counts the calls asked of the breaker so far, admitted or
// refused. A coordinator compares two readings to tell whether this process
// has traffic, and so whether it would probe at all if it held the fleet's
// probe lease.
func (p *Policy) Demand() int64 {
	if p.breaker == nil {
		return 0
	}
	return p.breaker.demand.Load()
}

// HalfOpenProbes is how many probes the local breaker admits when half-open,
// which is also how many a coordinator should impose.
func (p *Policy) HalfOpenProbes() int { return p.cfg.HalfOpenProbes }

// Background reports whether no customer waits on this policy's calls
// (Config.Background): a coordinator lets live processes take the fleet's
// probe lease first.
func (p *Policy) Background() bool { return p.cfg.Background }

// BreakDuration is how long the breaker stays open after a failed probe
// (see Config.BreakDuration), with this policy's jitter.
func (p *Policy) BreakDuration() time.Duration { return p.cfg.BreakDuration(p.rnd) }

// gate is an imposed state as the per-call path reads it: deadlines as
// offsets from the breaker's epoch (monotonic), and the probes' bookkeeping.
type gate struct {
	source    Source
	state     string // open, half-open or probing, as imposed
	openUntil time.Duration
	holdUntil time.Duration
	probes    int32        // successes that close the fleet's breaker
	permits   atomic.Int32 // probes still to admit
	succeeded atomic.Int32
	verdict   atomic.Bool // reported once
}

// admit is the gate's decision for one call, read with atomics only: refuse
// with an error, let it through as a probe (probe true), or let the local
// breaker decide (nil, false).
func (g *gate) admit(now time.Duration) (probe bool, err error) {
	switch {
	case now < g.openUntil:
		return false, ErrOpen
	case now >= g.holdUntil:
		return false, nil
	case g.probes == 0:
		return false, ErrTooManyRequests
	}
	for {
		n := g.permits.Load()
		if n <= 0 {
			return false, ErrTooManyRequests
		}
		if g.permits.CompareAndSwap(n, n-1) {
			return true, nil
		}
	}
}

func (b *breaker) now() time.Duration { return time.Since(b.epoch) }

func (b *breaker) impose(im Imposed) {
	now := b.now()
	g := &gate{
		source:    im.Source,
		openUntil: now + im.OpenFor,
		holdUntil: now + max(im.HoldFor, im.OpenFor),
		probes:    int32(max(im.Probes, 0)),
	}
	g.permits.Store(g.probes)
	state := "open"
	switch {
	case im.OpenFor > 0:
	case im.Probes > 0:
		state = "probing"
	default:
		state = "half-open"
	}
	g.state = state
	prev := b.gate.Swap(g)
	if prev != nil && prev.source == g.source && prev.state == state && b.now() < prev.holdUntil {
		return // a renewal (a forced state's next slice): nothing new to report
	}
	b.setSource(im.Source)
	b.imposed.WithLabelValues(b.name, im.Source.String(), state).Inc()
	b.log.LogAttrs(context.Background(), slog.LevelInfo, "circuit breaker state imposed",
		slog.String("name", b.name),
		slog.String("source", im.Source.String()),
		slog.String("state", state),
		slog.Duration("open_for", im.OpenFor),
		slog.Duration("hold_for", max(im.HoldFor, im.OpenFor)),
		slog.Int("probes", im.Probes),
	)
}

// release drops the imposed state, if any, and reports whether there was
// one.
func (b *breaker) release() bool {
	g := b.gate.Swap(nil)
	if g == nil {
		return false
	}
	b.winStale.Store(true)
	b.released(g)
	return true
}

func (b *breaker) released(g *gate) {
	b.setSource(SourceLocal)
	b.imposed.WithLabelValues(b.name, g.source.String(), "released").Inc()
	b.log.LogAttrs(context.Background(), slog.LevelInfo, "circuit breaker state released",
		slog.String("name", b.name), slog.String("source", g.source.String()))
}

func (b *breaker) setSource(s Source) {
	for i, name := range sourceNames {
		v := 0.0
		if Source(i) == s {
			v = 1
		}
		b.sourceGauge.WithLabelValues(b.name, name).Set(v)
	}
}

// probeDone hears how a probe admitted by g ended: success, failure, or
// neither (excluded: the permit goes back). The first failure, or the last
// needed success, is the verdict; a success also releases g at once, so
// this process's calls flow again before the coordinator has told anyone.
func (b *breaker) probeDone(g *gate, o probeOutcome) {
	switch o {
	case probeExcluded:
		g.permits.Add(1)
		return
	case probeSucceeded:
		if g.succeeded.Add(1) < g.probes || !g.verdict.CompareAndSwap(false, true) {
			return
		}
		if b.gate.CompareAndSwap(g, nil) {
			b.released(g)
		}
		b.events.push(Event{Kind: EventProbeSucceeded, At: time.Now()})
	case probeFailed:
		if !g.verdict.CompareAndSwap(false, true) {
			return
		}
		g.permits.Store(0)
		b.events.push(Event{Kind: EventProbeFailed, At: time.Now()})
	}
}

type probeOutcome uint8

const (
	probeExcluded probeOutcome = iota
	probeSucceeded
	probeFailed
)

// eventQueue hands events from under gobreaker's lock (or a timer
// goroutine) to the coordinator's goroutine. Its mutex is its own and is
// held only to append or swap the slice.
type eventQueue struct {
	mu   sync.Mutex
	q    []Event
	wake chan struct{}
}

func newEventQueue() *eventQueue { return &eventQueue{wake: make(chan struct{}, 1)} }

func (e *eventQueue) push(ev Event) {
	e.mu.Lock()
	// A coordinator that never reads would grow the queue without bound;
	// keep the latest events, which are the ones that matter.
	if len(e.q) >= 64 {
		e.q = append(e.q[:0], e.q[len(e.q)-32:]...)
	}
	e.q = append(e.q, ev)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *eventQueue) take() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.q
	e.q = nil
	return q
}
