package resilience

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrBulkheadFull means the concurrency limit stayed reached for the whole
// bounded wait, so the call was not made.
var ErrBulkheadFull = errors.New("resilience: bulkhead full")

// signal is what one call tells the limit about the dependency.
type signal uint8

const (
	noSignal  signal = iota // a final answer, a caller that gave up, or already said in flight
	healthy                 // succeeded before it was late
	congested               // late, timed out or a transient error: a drop, for AIMD
)

// limiter bounds the calls in flight to one dependency by AIMD between min
// and max (equal: a fixed bulkhead): rules L1–L7, L9, L10 of docs/design.md.
// Delay-based limits (Netflix's Gradient2, failsafe-go's adaptivelimiter)
// learn from calls that complete, and a hung dependency completes none;
// AIMD takes a drop signal per call, and L2 fires while it is in flight.
type limiter struct {
	min, max   int
	backoff    float64
	wait       time.Duration
	tail       tail
	lateFactor float64       // × tail's 99th percentile is the late point (L2); 0: the slow threshold
	holding    atomic.Int32  // len(held), for lateAfter, which reads it without the lock
	yields     bool          // a background policy's limit (Config.Background)
	probeEvery time.Duration // how often a call that is no probe may go over held slots (L4)

	mu          sync.Mutex
	limit       int
	inFlight    int
	starved     bool // a caller found the limit reached since it last grew
	sinceGrown  int  // healthy calls since it last grew (L9)
	ssthresh    int  // a background limit grows per round trip from here (L9); 0: none
	dropped     bool // the limit dropped and has not grown since (L9)
	waiters     []*waiter
	held        []time.Time // when each slot kept by hold frees at the latest, in order
	probing     bool        // a call holds the slot over the limit (acquireProbe)
	probedAt    time.Time   // when the last such call took it
	fullSince   time.Time   // since when held slots fill the limit; zero while they do not
	healthyAt   time.Time   // when a call last came back healthy
	abandonedAt time.Time   // when a call was last given up on

	limitGauge prometheus.Gauge
	inUse      prometheus.Gauge
	rejected   prometheus.Counter // ErrBulkheadFull
}

// waiter is one caller queued for a slot; grant sets granted, under l.mu.
type waiter struct {
	ready   chan struct{}
	granted bool
}

// limiterMetrics are one policy's children of the limit's collectors.
type limiterMetrics struct {
	limit    prometheus.Gauge
	inUse    prometheus.Gauge
	rejected prometheus.Counter
}

func newLimiter(initial, minLimit, maxLimit int, backoff float64, wait time.Duration, m limiterMetrics) *limiter {
	l := &limiter{
		min: minLimit, max: maxLimit, backoff: backoff, wait: wait,
		limit: initial, limitGauge: m.limit, inUse: m.inUse, rejected: m.rejected,
	}
	l.limitGauge.Set(float64(initial))
	return l
}

// acquire takes a slot, waiting at most l.wait and never past ctx.
func (l *limiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	if l.takeFree() {
		l.mu.Unlock()
		return nil
	}
	l.starved = true
	if l.wait <= 0 {
		l.mu.Unlock()
		l.rejected.Inc()
		return ErrBulkheadFull
	}
	w := &waiter{ready: make(chan struct{})}
	l.waiters = append(l.waiters, w)
	l.mu.Unlock()

	var err error
	select {
	case <-w.ready:
		return nil // grant counted the slot
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(l.wait):
		err = ErrBulkheadFull
	}
	l.mu.Lock()
	if w.granted {
		// Granted as the wait ended: a caller still there takes the slot,
		// one that gave up hands it on.
		if errors.Is(err, ErrBulkheadFull) {
			l.mu.Unlock()
			return nil
		}
		l.inFlight--
		l.grant()
		l.inUse.Set(float64(l.inFlight))
		l.mu.Unlock()
		return err
	}
	l.waiters = slices.DeleteFunc(l.waiters, func(x *waiter) bool { return x == w })
	l.mu.Unlock()
	if errors.Is(err, ErrBulkheadFull) {
		l.rejected.Inc()
	}
	return err
}

// acquireProbe is acquire, except when held slots fill the limit (L4): then
// one call at a time goes over it, a breaker's probe at once, another call
// once the limit has been full, and the last such call gone, for
// probeEvery. over reports that slot: call endProbe when the call returns.
func (l *limiter) acquireProbe(ctx context.Context, probe func() bool) (over bool, err error) {
	l.mu.Lock()
	if l.takeFree() {
		l.mu.Unlock()
		return false, nil // the common case: one lock
	}
	wait := l.probeWait(time.Now())
	l.mu.Unlock()
	if wait < 0 {
		return false, l.acquire(ctx)
	}
	// probe takes the breaker's lock: never under l.mu.
	isProbe := probe()
	l.mu.Lock()
	if wait = l.probeWait(time.Now()); wait == 0 || (wait > 0 && isProbe) {
		l.probing = true
		l.probedAt = time.Now()
		l.inFlight++
		l.inUse.Set(float64(l.inFlight))
		l.mu.Unlock()
		return true, nil
	}
	l.mu.Unlock()
	return false, l.acquire(ctx)
}

// probeWait is how long until a call that is no probe may go over held
// slots, -1 when they do not fill the limit or a call is over it already.
// Call it with l.mu held.
func (l *limiter) probeWait(now time.Time) time.Duration {
	if len(l.held) < l.limit || l.inFlight < l.limit {
		l.fullSince = time.Time{}
		return -1
	}
	if l.fullSince.IsZero() {
		l.fullSince = now
	}
	if l.probing {
		return -1
	}
	from := l.fullSince
	if l.probedAt.After(from) {
		from = l.probedAt
	}
	return max(l.probeEvery-now.Sub(from), 0)
}

// endProbe lets the next call go over the limit; release frees the slot.
func (l *limiter) endProbe() {
	l.mu.Lock()
	l.probing = false
	l.mu.Unlock()
}

// takeFree takes a slot if one is free and nobody waits. Call with l.mu held.
func (l *limiter) takeFree() bool {
	if l.inFlight >= l.limit || len(l.waiters) > 0 {
		return false
	}
	l.fullSince = time.Time{}
	l.inFlight++
	l.inUse.Set(float64(l.inFlight))
	return true
}

// grant hands free slots to waiters, oldest first. Call it with l.mu held,
// then update the in-use gauge.
func (l *limiter) grant() {
	for len(l.waiters) > 0 && l.inFlight < l.limit {
		w := l.waiters[0]
		l.waiters = slices.Delete(l.waiters, 0, 1)
		l.inFlight++
		w.granted = true
		close(w.ready)
	}
}

// release applies what a returned call said, then frees its slot.
func (l *limiter) release(s signal) {
	l.mu.Lock()
	l.adapt(s)
	l.inFlight--
	l.grant()
	l.inUse.Set(float64(l.inFlight))
	l.mu.Unlock()
}

// hold applies s but keeps the slot (L3) until free is called: when the
// dependency answers the call given up on, by until at the latest (send).
func (l *limiter) hold(s signal, until time.Time) (free func()) {
	l.mu.Lock()
	l.abandonedAt = time.Now()
	l.adapt(s)
	i, _ := slices.BinarySearchFunc(l.held, until, time.Time.Compare)
	l.held = slices.Insert(l.held, i, until)
	l.holding.Store(int32(len(l.held)))
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		if i := slices.IndexFunc(l.held, until.Equal); i >= 0 {
			l.held = slices.Delete(l.held, i, i+1)
			l.holding.Store(int32(len(l.held)))
		}
		if l.limit > l.max { // a lift over held slots ends with them
			l.limit = l.max
			l.limitGauge.Set(float64(l.limit))
		}
		l.mu.Unlock()
		l.release(noSignal)
	}
}

// retryIn is how long until a call may get a slot: when held slots fill
// the limit, until a call may go over it or one out is due to answer; not
// until the holds end, which would hide a recovery.
func (l *limiter) retryIn(answerWithin time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if wait := l.probeWait(now); wait >= 0 {
		return wait
	}
	if len(l.held) < l.limit {
		return 0
	}
	// Once all but limit-1 of the holds have ended, one slot is free.
	wait := max(l.held[len(l.held)-l.limit].Sub(now), 0)
	if l.probing {
		wait = min(wait, max(l.probedAt.Add(answerWithin).Sub(now), 0))
	}
	return wait
}

// recovered applies the fleet's probe's fast answer (Policy.Release) as
// adapt applies a healthy call: healthyAt, and the lift over held slots.
func (l *limiter) recovered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.healthyAt = time.Now()
	if l.liftOverHeld() {
		l.limitGauge.Set(float64(l.limit))
		l.grant()
		l.inUse.Set(float64(l.inFlight))
	}
}

// liftOverHeld lifts a limit full of held slots to them plus one, and
// reports whether it did: a dependency that just answered in time has room
// beside them (L4). Call it with l.mu held.
func (l *limiter) liftOverHeld() bool {
	if len(l.held) < l.limit {
		return false
	}
	l.limit = min(len(l.held)+1, 2*l.max-1) // and a probe over it: MaxConcurrency
	return true
}

// heldRefuses reports whether a refusal now is the dependency's doing (L7):
// every slot is held for a call it never answered, and none has come back
// in time since (one that has is busy, not failing).
func (l *limiter) heldRefuses() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) < l.limit {
		return false
	}
	return !l.abandonedAt.Before(l.healthyAt)
}

// lateAfter is how long a call may be in flight before it is late (L2):
// lateFactor × the 99th percentile of recent successful calls, between half
// the slow threshold and it, so that a long tail is no congestion. While
// slots are held it is the slow threshold (L6): a provider finishing
// abandoned calls is slower for a reason they already count. Not for a
// background limit, whose bounds are four fifths of these (L10): a drain's
// own calls drag the percentile up to where only the breaker would hear.
func (l *limiter) lateAfter(slow time.Duration) time.Duration {
	if l.yields {
		slow = slow * 4 / 5
	}
	p99 := l.tail.percentile99()
	if l.lateFactor <= 0 || p99 == 0 || (l.holding.Load() > 0 && !l.yields) {
		return slow
	}
	return min(max(time.Duration(float64(p99)*l.lateFactor), slow/2), slow)
}

// returned adds a successful call's latency to the tail, late ones too: a
// dependency slower for good moves the percentile, not the limit for ever.
func (l *limiter) returned(sent time.Time, ok bool) {
	if ok {
		l.tail.add(time.Since(sent))
	}
}

// congested applies the signal of a call still in flight.
func (l *limiter) congested() {
	l.mu.Lock()
	l.adapt(congested)
	l.mu.Unlock()
}

// adapt moves the limit for signal s (L1). Call it with l.mu held, the
// signalling call still counted in flight.
func (l *limiter) adapt(s signal) {
	old := l.limit
	switch s {
	case healthy:
		l.healthyAt = time.Now()
		l.grow()
	case congested:
		l.limit = max(l.min, int(float64(l.limit)*l.backoff))
		if l.yields && !l.dropped { // L9: the first drop of an overshoot sets it
			l.ssthresh = l.limit
		}
		l.dropped, l.sinceGrown = true, 0
	}
	if l.limit != old {
		l.limitGauge.Set(float64(l.limit))
	}
}

// grow applies a healthy call (L1): the lift over held slots, then +1, as
// TCP's slow start, if every slot is taken or a caller found none since it
// last grew: an idle dependency proves nothing (Netflix's AIMDLimit skips
// such samples). Call it with l.mu held.
func (l *limiter) grow() {
	l.liftOverHeld()
	pressed := l.starved || l.inFlight+len(l.waiters) >= l.limit
	if l.limit >= l.max || !pressed {
		return
	}
	if l.yields && (l.tail.percentile99() == 0 || (l.ssthresh > 0 && l.limit >= l.ssthresh)) {
		// L9: a slot per round trip, not per call, with no late point yet
		// (L2 needs minTailSamples) or above the limit a drop left (TCP
		// Reno's slow-start threshold): a drain must not double past the
		// dependency's capacity before anything can say it is late, nor after.
		if l.sinceGrown++; l.sinceGrown < l.limit {
			return
		}
	}
	l.limit++
	l.starved, l.dropped = false, false
	l.sinceGrown = 0
}

// current returns the limit and the calls in flight (Policy.Limit, tests).
func (l *limiter) current() (limit, inFlight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit, l.inFlight
}
