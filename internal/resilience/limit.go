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

// limiter bounds the calls in flight to one dependency. Its limit adapts
// between min and max (min = max: a fixed bulkhead) by additive increase,
// multiplicative decrease (AIMD). docs/design.md, "The
// payment limit's rules", numbers the rules, with the scenario-matrix row
// that gets worse without each; the comments below name them L1–L7 (L8 is
// breaker.refusesNow).
//
// Why AIMD: the delay-based limits (Vegas and Gradient2 in Netflix's
// concurrency-limits, failsafe-go's adaptivelimiter) learn from calls that
// complete, and a hung dependency completes nothing until the attempt
// timeout. This stack has a drop signal that fires while a call is still in
// flight (the late point, L2), and AIMD consumes exactly such a binary
// signal, one per call, at once. It is also the simplest to read and test.
//
// Waiters are served in FIFO order: a slot freed by a completing call, or
// added by an increase, goes to the caller that has waited longest.
type limiter struct {
	min, max int
	backoff  float64
	wait     time.Duration
	// lateFactor × the 99th percentile of recent successful calls' latency
	// (tail) is when a call still in flight is late (L2, lateAfter); 0
	// turns lateness off, so a call is late at the slow threshold.
	lateFactor float64
	tail       tail
	holding    atomic.Int32 // len(held), for lateAfter, which reads it without the lock
	yields     bool         // a background policy's limit (Config.Background)

	mu       sync.Mutex
	limit    int
	inFlight int
	// starved records that a caller found the limit reached since the
	// limit last grew: demand the in-flight count alone does not show
	// once that caller has given up.
	starved bool
	waiters []*waiter
	held    []time.Time // when each slot kept by releaseAfter frees, in order
	// probing is set while a call holds the slot over the limit
	// (acquireProbe), probedAt when the last one took it, and fullSince
	// since when the limit has been full of held slots (zero when it is
	// not); probeEvery is how long a call that is not a breaker's probe
	// waits after either (Config.OpenDuration).
	probing     bool
	probedAt    time.Time
	healthyAt   time.Time // when a call last came back healthy
	abandonedAt time.Time // when a call was last given up on
	fullSince   time.Time
	probeEvery  time.Duration

	limitGauge prometheus.Gauge
	inUse      prometheus.Gauge
	rejected   prometheus.Counter // ErrBulkheadFull
}

// waiter is one caller queued for a slot. grant closes ready with granted
// set, under the limiter's lock, after counting the slot as taken.
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

// newLimiter starts at initial and moves between minLimit and maxLimit by
// the rules above.
func newLimiter(initial, minLimit, maxLimit int, backoff float64, wait time.Duration, m limiterMetrics) *limiter {
	l := &limiter{
		min: minLimit, max: maxLimit, backoff: backoff, wait: wait,
		limit: initial, limitGauge: m.limit, inUse: m.inUse, rejected: m.rejected,
	}
	l.limitGauge.Set(float64(initial))
	return l
}

// acquire takes a slot, waiting at most l.wait and never past ctx. It
// returns ErrBulkheadFull when the wait runs out, or ctx's error when the
// caller gives up first; neither says anything about the dependency.
func (l *limiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	if l.takeFree() {
		l.mu.Unlock()
		return nil
	}
	l.starved = true
	if l.wait <= 0 {
		l.mu.Unlock()
		return l.reject()
	}
	w := &waiter{ready: make(chan struct{})}
	l.waiters = append(l.waiters, w)
	l.mu.Unlock()

	t := time.NewTimer(l.wait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return nil // grant counted the slot
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = ErrBulkheadFull
	}
	l.mu.Lock()
	if w.granted {
		// A slot was granted while the wait ended. A caller still
		// waiting takes it; one that gave up hands it on.
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
		return l.reject()
	}
	return err
}

// acquireProbe is acquire, except when every slot is held for an abandoned
// call (L4): then one call at a time takes a slot over the limit instead
// of waiting for the holds to end — a breaker's probe (probe reports
// whether the call is one) at once, any other call once the limit has
// been full for probeEvery and as long since the last such call. Its
// answer tells whether the dependency still holds those calls: a fast one
// lifts the limit above them (liftOverHeld), a hung one is held in turn.
// over reports a slot over the limit; the caller calls endProbe when the
// call returns.
func (l *limiter) acquireProbe(ctx context.Context, probe func() bool) (over bool, err error) {
	l.mu.Lock()
	if l.takeFree() {
		l.mu.Unlock()
		return false, nil // the common case: one lock, as acquire alone
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

// probeWait is how long until a call that is not a breaker's probe may go
// over a limit full of held slots, or -1 when nothing of the kind holds
// calls back (not full of held slots, or a call already over).
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

// endProbe frees the claim on the slot over the limit for the next call;
// the slot itself is freed by release or releaseAfter.
func (l *limiter) endProbe() {
	l.mu.Lock()
	l.probing = false
	l.mu.Unlock()
}

// takeFree takes a slot if one is free and nobody waits for it; the limit
// is then not full of held slots either. Call it with l.mu held.
func (l *limiter) takeFree() bool {
	if l.inFlight >= l.limit || len(l.waiters) > 0 {
		return false
	}
	l.fullSince = time.Time{}
	l.inFlight++
	l.inUse.Set(float64(l.inFlight))
	return true
}

func (l *limiter) reject() error {
	l.rejected.Inc()
	return ErrBulkheadFull
}

// grant hands free slots to waiters, oldest first. Call it with l.mu held;
// the caller updates the in-use gauge.
func (l *limiter) grant() {
	for len(l.waiters) > 0 && l.inFlight < l.limit {
		w := l.waiters[0]
		l.waiters = slices.Delete(l.waiters, 0, 1)
		l.inFlight++
		w.granted = true
		close(w.ready)
	}
}

// release frees the slot of a call that has returned, after applying what
// the call said about the dependency (noSignal if it was already reported
// while in flight).
func (l *limiter) release(s signal) {
	l.mu.Lock()
	if l.adapt(s) {
		l.limitGauge.Set(float64(l.limit))
	}
	l.inFlight--
	l.grant()
	l.inUse.Set(float64(l.inFlight))
	l.mu.Unlock()
}

// releaseAfter applies s like release, but keeps the slot for d more (L3):
// the call was abandoned (timed out, or its caller left) and the dependency
// may still be working on it (Config.AbandonedHold), so new calls, probes
// included, do not pile onto it.
func (l *limiter) releaseAfter(s signal, d time.Duration) {
	if d <= 0 {
		l.release(s)
		return
	}
	until := time.Now().Add(d)
	l.mu.Lock()
	l.abandonedAt = time.Now()
	if l.adapt(s) {
		l.limitGauge.Set(float64(l.limit))
	}
	i, _ := slices.BinarySearchFunc(l.held, until, time.Time.Compare)
	l.held = slices.Insert(l.held, i, until)
	l.holding.Store(int32(len(l.held)))
	l.mu.Unlock()
	time.AfterFunc(d, func() {
		l.mu.Lock()
		if i := slices.IndexFunc(l.held, until.Equal); i >= 0 {
			l.held = slices.Delete(l.held, i, i+1)
			l.holding.Store(int32(len(l.held)))
		}
		if l.limit > l.max {
			l.limit = l.max
			l.limitGauge.Set(float64(l.limit))
		}
		l.mu.Unlock()
		l.release(noSignal)
	})
}

// retryIn is how long until a call may get a slot, for RetryAfter: 0 when
// calls in flight will free theirs. When held slots fill the limit it is
// until a call may go over it (probeWait), or, while one is out, until its
// answer is due (answerWithin after it went) — not until the holds end,
// which would hide a dependency that recovered long before.
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
// grow applies this process's: a limit full of held slots is lifted above
// them, and refusals are no longer the dependency's doing (heldRefuses).
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

// liftOverHeld lifts a limit full of held slots to those slots plus one and
// reports whether it did: the dependency has just answered in time, so it
// has room beside them (L4). Call it with l.mu held.
func (l *limiter) liftOverHeld() bool {
	n := len(l.held)
	if n < l.limit {
		return false
	}
	l.limit = n + 1
	return true
}

// heldRefuses reports whether a refusal now is the dependency's doing (L7):
// every slot is held for a call it never answered, and none has come back
// in time since. The breaker then counts the refusal as a failure, so that
// it opens, and tells the fleet, although the limit leaves it too few
// calls to judge. A dependency answering in time again is busy, not
// failing.
func (l *limiter) heldRefuses() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) < l.limit {
		return false
	}
	return !l.abandonedAt.Before(l.healthyAt)
}

// lateAfter is how long a call may be in flight before it is late (L2), a
// congestion signal sent before the breaker's slow threshold: lateFactor ×
// the 99th percentile of recent successful calls, kept between half the
// slow threshold and it. Judged against what this dependency's healthy
// calls take, a long tail is not congestion. Before minTailSamples calls
// it is slow.
//
// While slots are held it is slow too (L6), except for a background limit
// (yields): a provider still working on calls given up on in a hang is
// slower for a while for a reason the held slots already count, and late
// at lateFactor the live calls beside them would halve the limit again and
// again; the slow threshold still tells a second hang. A background
// limit's late calls are how the backlog gives way to them.
func (l *limiter) lateAfter(slow time.Duration) time.Duration {
	p99 := l.tail.percentile99()
	if l.lateFactor <= 0 || p99 == 0 || (l.holding.Load() > 0 && !l.yields) {
		return slow
	}
	return min(max(time.Duration(float64(p99)*l.lateFactor), slow/2), slow)
}

// returned adds a successful call's latency to the tail lateness is judged
// against. Late successes count too, so a dependency that has become
// slower for good moves the percentile instead of being halved for ever.
func (l *limiter) returned(sent time.Time, ok bool) {
	if ok {
		l.tail.add(time.Since(sent))
	}
}

// congested applies the signal of a call still in flight, from its timer
// the moment it is late.
func (l *limiter) congested() {
	l.mu.Lock()
	if l.adapt(congested) {
		l.limitGauge.Set(float64(l.limit))
	}
	l.mu.Unlock()
}

// adapt moves the limit for signal s (L1) and reports whether it changed.
// Call it with l.mu held, the signalling call still counted in flight.
func (l *limiter) adapt(s signal) bool {
	old := l.limit
	switch s {
	case healthy:
		l.healthyAt = time.Now()
		l.grow()
	case congested:
		l.limit = max(l.min, int(float64(l.limit)*l.backoff))
	}
	return l.limit != old
}

// grow applies a healthy call (L1): the lift over held slots, then one more
// slot if the load presses on the limit — every slot taken, or a caller
// found it reached since it last grew. An idle dependency proves nothing
// about its capacity (Netflix's AIMDLimit skips such samples too). One per
// healthy call doubles the limit per round trip, like TCP's slow start.
// Call it with l.mu held.
func (l *limiter) grow() {
	l.liftOverHeld()
	pressed := l.starved || l.inFlight+len(l.waiters) >= l.limit
	if l.limit >= l.max || !pressed {
		return
	}
	l.limit++
	l.starved = false
}

// current returns the limit and the calls in flight, for tests.
func (l *limiter) current() (limit, inFlight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit, l.inFlight
}
