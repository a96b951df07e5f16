package resilience

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Source says who decides whether a breaker lets calls through.
type Source uint8

const (
	SourceLocal  Source = iota // the process's own breaker
	SourceFleet                // another process's, shared by a coordinator (internal/fleet)
	SourceForced               // an operator forced the dependency open
)

var sourceNames = [...]string{SourceLocal: "local", SourceFleet: "fleet", SourceForced: "forced"}

func (s Source) String() string { return nameOr(sourceNames[:], s) }

// nameOr returns v's name in names, or "unknown".
func nameOr[T ~uint8](names []string, v T) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return "unknown"
}

// Imposed is a breaker state a coordinator sets from outside the process, in
// durations from now: a shared store's clock is not ours. It refuses every
// call with [ErrOpen] for OpenFor; then, until HoldFor, admits Probes calls as
// the fleet's probes, or, with none, refuses with [ErrTooManyRequests]. After
// HoldFor the local breaker decides again: a lost message cannot keep it open.
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
	// EventProbeSucceeded: every probe of an imposed state succeeded; the
	// policy has released that state already.
	EventProbeSucceeded
	// EventProbeFailed: a probe of an imposed state failed or was slow; calls
	// are refused until the coordinator imposes the next state or the hold ends.
	EventProbeFailed
)

var eventKindNames = [...]string{
	EventOpened: "opened", EventProbeSucceeded: "probe_succeeded", EventProbeFailed: "probe_failed",
}

func (k EventKind) String() string { return nameOr(eventKindNames[:], k) }

// Event is what a coordinator must hear: the local breaker opened, or a probe's verdict.
type Event struct {
	Kind    EventKind
	At      time.Time
	OpenFor time.Duration // EventOpened: how long the local breaker stays open
}

// Events returns a channel (capacity 1, so that the breaker never blocks
// under gobreaker's lock) that wakes whenever events wait for TakeEvents.
func (p *Policy) Events() <-chan struct{} { return p.events.wake }

// TakeEvents returns the events queued since the last call, oldest first.
func (p *Policy) TakeEvents() []Event { return p.events.take() }

// Impose sets the breaker's state from outside, replacing any imposed before.
func (p *Policy) Impose(im Imposed) {
	if p.breaker != nil {
		p.breaker.impose(im)
	}
}

// Release gives the decision back to the local breaker: the fleet's probe found the
// dependency answering, or an operator cleared a forced state. The window starts afresh, or
// calls that hung before would reopen it; held slots make room for one call (limiter.recovered).
func (p *Policy) Release() {
	if p.breaker != nil && p.breaker.release() {
		p.limit.recovered()
	}
}

// Source returns who decides now: SourceLocal unless an imposed state still holds.
func (p *Policy) Source() Source {
	if p.breaker != nil {
		if g := p.breaker.gate.Load(); g != nil && p.breaker.now() < g.holdUntil {
			return g.source
		}
	}
	return SourceLocal
}

// Demand counts the calls asked of the breaker, admitted or not: two
// readings tell a coordinator whether this process has traffic to probe with.
func (p *Policy) Demand() int64 {
	if p.breaker == nil {
		return 0
	}
	return p.breaker.demand.Load()
}

// ProbeSent reports whether a probe for the fleet went out under the last imposed state.
func (p *Policy) ProbeSent() bool {
	if p.breaker == nil {
		return false
	}
	g := p.breaker.gate.Load()
	return g != nil && g.permits.Load() < g.probes
}

// HalfOpenProbes is how many probes a coordinator imposes: as many as the breaker admits.
func (p *Policy) HalfOpenProbes() int { return p.cfg.HalfOpenProbes }

// Background reports Config.Background: live processes take the probe lease first.
func (p *Policy) Background() bool { return p.cfg.Background }

// BreakDuration is Config.BreakDuration with this policy's jitter.
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

// admit is the gate's decision for one call, with atomics only: a refusal,
// a probe, or (false, nil) for the local breaker to decide.
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
	switch {
	case im.OpenFor > 0:
		g.state = "open"
	case im.Probes > 0:
		g.state = "probing"
	default:
		g.state = "half-open"
	}
	prev := b.gate.Swap(g)
	if prev != nil && prev.source == g.source && prev.state == g.state && b.now() < prev.holdUntil {
		return // a renewal (a forced state's next slice): nothing new to report
	}
	b.era.Add(1)
	b.winStale.Store(true)
	b.setSource(im.Source)
	b.imposed.WithLabelValues(b.name, im.Source.String(), g.state).Inc()
	b.log.LogAttrs(context.Background(), slog.LevelInfo, "circuit breaker state imposed",
		slog.String("name", b.name), slog.String("source", im.Source.String()), slog.String("state", g.state),
		slog.Duration("open_for", im.OpenFor), slog.Duration("hold_for", max(im.HoldFor, im.OpenFor)),
		slog.Int("probes", im.Probes))
}

// release drops the imposed state and reports whether there was one.
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

// probeDone hears how a probe admitted by g ended, as reported to
// gobreaker. The first failure, or the last success needed, is the verdict;
// a success releases g at once, before the coordinator has told anyone.
func (b *breaker) probeDone(g *gate, report error) {
	switch {
	case errors.Is(report, errReportExcluded):
		g.permits.Add(1)
	case report == nil:
		if g.succeeded.Add(1) < g.probes || !g.verdict.CompareAndSwap(false, true) {
			return
		}
		if b.gate.CompareAndSwap(g, nil) {
			b.released(g)
		}
		b.events.push(Event{Kind: EventProbeSucceeded, At: time.Now()})
	default:
		if !g.verdict.CompareAndSwap(false, true) {
			return
		}
		g.permits.Store(0)
		b.events.push(Event{Kind: EventProbeFailed, At: time.Now()})
	}
}

// eventQueue hands events to the coordinator's goroutine (Policy.Events).
// Its mutex is held only to append or swap the slice.
type eventQueue struct {
	mu   sync.Mutex
	q    []Event
	wake chan struct{}
}

func newEventQueue() *eventQueue { return &eventQueue{wake: make(chan struct{}, 1)} }

func (e *eventQueue) push(ev Event) {
	e.mu.Lock()
	// Bound the queue of a coordinator that never reads; keep the latest.
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
