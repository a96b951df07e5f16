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

// signal is what one call tells the limit about the dependency.
type signal uint8

const (
	// noSignal: the call says nothing about the dependency's capacity (a
	// final answer such as a decline, or the caller gave up), or it has
	// already said it (reported slow while still in flight).
	noSignal signal = iota
	// healthy: the call succeeded within the slow threshold.
	healthy
	// congested: the call ran past the slow threshold, timed out or failed
	// with a transient error. For a congestion-control algorithm this is a
	// drop.
	congested
)

// limiter bounds the calls in flight to one dependency. Its limit is either
// fixed (the static bulkhead, min = max) or adapts between min and max by
// additive increase, multiplicative decrease (AIMD). docs/design.md, "The
// payment limit's rules", numbers the rules, with the scenario-matrix row
// that gets worse without each; the comments below name them L1–L7.
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
	adaptive bool
	min, max int
	backoff  float64
	wait     time.Duration
	// lateFactor × the 99th percentile of recent successful calls' latency
	// (tail) is when a call still in flight is late (L2, lateAfter); 0
	// turns lateness off, so a call is late at the slow threshold.
	lateFactor float64
	tail       tail
	// holding counts the slots kept for abandoned calls, len(held), for
	// lateAfter, which reads it without the lock. yields is set for a
	// background policy's limit (Config.Background).
	holding atomic.Int32
	yields  bool

	mu       sync.Mutex
	limit    int
	inFlight int
	// starved records that a caller found the limit reached since the
	// limit last grew: demand the in-flight count alone does not show
	// once that caller has given up.
	starved bool
	waiters []*waiter
	// held holds, in order, when each slot kept by releaseAfter frees.
	held []time.Time
	// newsAt is when other processes' congestion news last lowered the
	// limit (congestedNews); zero before the first.
	newsAt time.Time
	// probing is set while a call holds the slot over the limit
	// (acquireProbe), probedAt when the last one took it, and fullSince
	// since when the limit has been full of held slots (zero when it is
	// not); probeEvery is how long a call that is not a breaker's probe
	// waits after either (Config.OpenDuration).
	probing  bool
	probedAt time.Time
	// healthyAt is when a call last came back healthy, abandonedAt when
	// one was last given up on (releaseAfter).
	healthyAt   time.Time
	abandonedAt time.Time
	fullSince   time.Time
	probeEvery  time.Duration

	limitGauge prometheus.Gauge
	inUse      prometheus.Gauge
	rejected   []prometheus.Counter // ErrBulkheadFull, counted on each
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
	rejected []prometheus.Counter
}

// newStaticLimiter is today's fixed bulkhead: size slots, never moved.
func newStaticLimiter(size int, wait time.Duration, m limiterMetrics) *limiter {
	return newLimiter(false, size, size, size, 1, wait, m)
}

// newAdaptiveLimiter starts at initial and moves between minLimit and
// maxLimit by the rules above.
func newAdaptiveLimiter(initial, minLimit, maxLimit int, backoff float64, wait time.Duration, m limiterMetrics) *limiter {
	return newLimiter(true, initial, minLimit, maxLimit, backoff, wait, m)
}

func newLimiter(adaptive bool, initial, minLimit, maxLimit int, backoff float64, wait time.Duration, m limiterMetrics) *limiter {
	l := &limiter{
		adaptive: adaptive, min: minLimit, max: maxLimit, backoff: backoff, wait: wait,
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

// acquireProbe is acquire, except when every slot is kept for an abandoned
// call (see releaseAfter): then one call at a time takes a slot over the limit
// instead of waiting for a hold to end — a breaker's probe (probe reports
// whether the call is one) at once, any other call only once the limit
// has been full of held slots for probeEvery and as long since the last
// such call. Those calls are the
// dependency's business only if it still holds them, and its answer to
// this one is what tells: a fast answer lifts the limit above the held
// slots (grow), a hung one is held in turn. over reports whether the
// call's slot is over the limit; the caller then calls endProbe when the
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

// probeWait is how long until a call that is not a breaker's probe may
// take the slot over a limit full of held slots, or -1 when that is not
// what holds calls back: the limit is not full of held slots, a call holds
// that slot already, or the limit is static, whose size is fixed. Call it
// with l.mu held.
func (l *limiter) probeWait(now time.Time) time.Duration {
	if !l.adaptive || len(l.held) < l.limit || l.inFlight < l.limit {
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

// endProbe ends a probe's claim on the slot over the limit, so the next
// probe can have it; the slot itself is freed by release or releaseAfter.
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
	for _, c := range l.rejected {
		c.Inc()
	}
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

// releaseAfter applies s like release, but the slot stays taken for d more:
// the call was abandoned (timed out, or its caller left) and the dependency
// may still be working on it (Config.AbandonedHold). Slots so held keep
// new calls, the breaker's probes included, from piling onto those calls.
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
		if l.adaptive && l.limit > l.top() {
			l.limit = l.top()
			l.limitGauge.Set(float64(l.limit))
		}
		l.mu.Unlock()
		l.release(noSignal)
	})
}

// retryIn is how long until a call may get a slot, for RetryAfter: 0 when
// the calls in flight will return and free theirs. When every slot is kept
// for an abandoned call (see releaseAfter) it is until a call may go over
// the limit (probeWait) or, while such a call is out, until its answer is
// due — answerWithin after it was sent, the attempt timeout: a fast answer
// lifts the limit, a hung one is held and the next call over the limit
// waits for probeWait. The held slots themselves may take the whole
// AbandonedHold to free, and a caller told to wait that long would not
// notice a dependency that recovered long before.
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

// recovered applies another process's fast answer from the dependency
// (the fleet's probe, see Policy.Release) as grow applies one of this
// process's: a limit full of held slots is lifted to them plus one, and
// refusals are no longer the dependency's doing (heldRefuses).
func (l *limiter) recovered() {
	if !l.adaptive {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.healthyAt = time.Now()
	if l.liftOverHeld() {
		l.limitGauge.Set(float64(l.limit))
		l.grant()
		l.inUse.Set(float64(l.inFlight))
	}
}

// liftOverHeld lifts a limit that every slot held for an abandoned call
// fills to those slots plus one, and reports whether it did: the
// dependency has just answered a call in time, so it has room for them and
// one more, whatever it did with them. Call it with l.mu held.
func (l *limiter) liftOverHeld() bool {
	n := len(l.held)
	if n < l.limit {
		return false
	}
	l.limit = n + 1
	return true
}

// heldRefuses reports whether a refusal now is the dependency's doing:
// every slot is kept for a call it never answered, and the last call to
// end was such a call rather than one answered in time. A dependency
// whose calls come back in time again is busy, not failing: the calls it
// held earlier are why the limit is full, and a refusal then must not
// open the breaker (see attempt).
func (l *limiter) heldRefuses() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) < l.limit {
		return false
	}
	return !l.abandonedAt.Before(l.healthyAt)
}

// lateAfter is how long a call may be in flight before it is late (L2): a
// congestion signal for the limit, sent before the breaker's slow
// threshold (slow) is reached. It is lateFactor times the 99th percentile
// of the last successful calls' latency (tail), but never sooner than half
// the slow threshold — a fast dependency's scheduling noise is not
// congestion — nor later than it. Judged against what this dependency's
// healthy calls take, a long tail is not congestion; judged against the
// mean, it was (docs/measurements.md, the scenario matrix's rows 2 and 3).
// Before minTailSamples calls, or outside the adaptive limit, it is slow.
//
// While slots are held for abandoned calls it is slow too (L6), except for
// a background limit (yields): a provider recovering from a hang is still
// working on the calls given up on, and is slower for a while for a reason
// the held slots already count. Late at lateFactor, the live calls beside
// them would halve the limit again and again (matrix row 6: 35 % of the
// orders after the hang charged at once instead of 95 %), while the
// slow threshold still tells a second hang. A background limit's late
// calls are how the backlog gives way to those live calls.
func (l *limiter) lateAfter(slow time.Duration) time.Duration {
	p99 := l.tail.percentile99()
	if !l.adaptive || l.lateFactor <= 0 || p99 == 0 || (l.holding.Load() > 0 && !l.yields) {
		return slow
	}
	return min(max(time.Duration(float64(p99)*l.lateFactor), slow/2), slow)
}

// returned tells the limit that a call sent at sent has returned, ok if it
// succeeded: a success's latency joins the tail lateness is judged
// against. Every successful call counts, late ones too, so a dependency
// that has become slower for good moves the percentile, and with it
// lateAfter, instead of being halved for ever.
func (l *limiter) returned(sent time.Time, ok bool) {
	if ok {
		l.tail.add(time.Since(sent))
	}
}

// congested applies a congestion signal from a call still in flight: the
// call's timer calls it the moment the call is late (see lateAfter).
func (l *limiter) congested() {
	if !l.adaptive {
		return
	}
	l.mu.Lock()
	if l.adapt(congested) {
		l.limitGauge.Set(float64(l.limit))
	}
	l.mu.Unlock()
}

// congestedNews applies a congestion signal another process sent, unless
// such news already lowered the limit less than every ago, and reports
// whether the limit moved.
func (l *limiter) congestedNews(now time.Time, every time.Duration) bool {
	if !l.adaptive {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.newsAt.IsZero() && now.Sub(l.newsAt) < every {
		return false
	}
	l.newsAt = now
	if !l.adapt(congested) {
		return false
	}
	l.limitGauge.Set(float64(l.limit))
	return true
}

// adapt moves the limit for signal s (L1) and reports whether it changed.
// Call it with l.mu held, the signalling call still counted in flight.
func (l *limiter) adapt(s signal) bool {
	if !l.adaptive {
		return false
	}
	old := l.limit
	switch s {
	case healthy:
		l.healthyAt = time.Now()
		l.grow()
	case congested:
		l.limit = l.decreased()
	}
	return l.limit != old
}

// decreased is the limit after a congestion signal: backoff times the
// calls it lets in beside the slots it keeps for abandoned calls
// (releaseAfter), not times those slots. Those calls were sent before this
// signal and end with their hold whatever the limit says: cutting them
// would only cut the live calls beside them. A limit already full of held
// slots has no live calls to spare, and is cut whole, so that it does not
// outlive the holds at the size it had before a hang. Call it with l.mu
// held.
func (l *limiter) decreased() int {
	if n := len(l.held); n < l.limit {
		return max(l.min, n+int(float64(l.limit-n)*l.backoff))
	}
	return max(l.min, int(float64(l.limit)*l.backoff))
}

// grow applies a healthy call (see adapt): the lift over held slots
// (liftOverHeld), then one more slot if the load presses on the limit —
// every slot was taken, or a caller found it reached since it last grew.
// An idle dependency proves nothing about its capacity (Netflix's
// AIMDLimit skips such "app-limited" samples too). One per healthy call
// doubles the limit per round trip while demand exceeds it, like TCP's
// slow start. Call it with l.mu held.
func (l *limiter) grow() {
	l.liftOverHeld()
	pressed := l.starved || l.inFlight+len(l.waiters) >= l.limit
	if l.limit >= l.top() || !pressed {
		return
	}
	l.limit++
	l.starved = false
}

// top is the highest the limit may grow: max calls waited on, and the
// slots kept for abandoned calls besides them. Those calls hold no
// connection here and no caller waits on them; counting them against max
// would leave a process whose slots a hang filled too few for its live
// load until the holds end. Call it with l.mu held.
func (l *limiter) top() int { return l.max + len(l.held) }

// current returns the limit and the calls in flight, for tests.
func (l *limiter) current() (limit, inFlight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit, l.inFlight
}
