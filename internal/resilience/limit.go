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
// fixed (the static bulkhead, min = max) or adapts between min and max with
// additive increase, multiplicative decrease (AIMD), and, where the
// demand has no bound of its own (the worker's backlog), a delay rule that
// stops it at the dependency's capacity.
//
// # Why AIMD
//
// The published adaptive limits divide into delay-based ones — Vegas and
// Gradient2 in Netflix's concurrency-limits, failsafe-go's adaptivelimiter,
// which estimate queueing from completed calls' latency against a baseline
// — and loss-based ones, AIMD, which react to drops. The delay-based ones
// learn only from calls that complete: failsafe-go recomputes its limit at
// most once a second and only after 50 samples (its defaults), Gradient2
// and Vegas per completed sample or sample window, and failsafe-go leaves
// timed-out calls out of its samples altogether (Permit.Drop). A hung dependency completes nothing until the attempt
// timeout, so all of them go on admitting calls into it for at least that
// long. This stack already has a better drop signal than latency
// statistics: the breaker's slow-call timer fires the moment a call has
// been in flight past the slow threshold. AIMD consumes exactly such a
// binary signal, one per call, and reacts to it at once; Netflix's
// AIMDLimit also counts a call slower than its timeout as a drop, but
// only when it completes. AIMD is also the simplest to read and test.
//
// # The rules
//
//   - A healthy call (succeeded within the slow threshold) adds one to the
//     limit, up to max, if the limit was what held the load back: every slot
//     was taken when it completed, or a caller has found the limit reached
//     since the last increase. An idle dependency proves nothing about its
//     capacity, so the limit does not grow when the load does not press on
//     it (Netflix's AIMDLimit and Gradient2 skip "app-limited" samples for
//     the same reason). One per healthy call doubles the limit per round
//     trip while demand exceeds it, like TCP's slow start, so a limit that
//     starts at 4 reaches rate × latency within a few hundred milliseconds.
//     The limit keeps what it reached while the dependency stays healthy;
//     only congestion lowers it.
//   - A congested call — one that ran past the slow threshold, timed out,
//     or failed with a transient error (a 5xx, a 429, a refused
//     connection: the provider in trouble, the breaker's failures) —
//     multiplies the limit by backoff (at least min), the moment it is
//     known: a call still in flight past the slow threshold counts right
//     then, reported by the breaker's slow-call timer, and only once. A
//     hung dependency therefore shrinks the limit below the calls it is
//     holding before any of them completes or times out, and the slots
//     those calls free when they time out are not handed to new calls.
//     Under the delay rule (a backlog's limit) a congested call cuts once
//     per round trip, and when the level it cut from was one no round had
//     found calm, that level less one caps the way back (see adapt).
//   - A call in flight past 1.1 × the 99th percentile of recent
//     successful calls' latency (with the default late factor; see
//     overdueAfter) — slower than any usual call, not yet late — holds
//     new calls back: they wait, within the bounded
//     wait, until it returns or turns late. Just before a hang is seen its first call is the only
//     sign of it, and every call sent then is one more the hang holds. A
//     hold is neither congestion nor demand: it cuts nothing, and a caller
//     it kept waiting does not grow the limit. It is off where lateness
//     waits for the slow threshold (slots held) and under the delay rule,
//     whose rounds judge a queue by latency (overdueAfter).
//   - Declines and other final answers, callers that gave up, and calls the
//     breaker or the limit refused say nothing about capacity and leave the
//     limit alone.
//   - A call abandoned without an answer (timed out, or its caller left)
//     keeps its slot for Config.AbandonedHold after it was sent: the
//     dependency may still be working on it, and the slot is what stands
//     for it here (releaseAfter). Held slots are a debt, not congestion:
//     they come on top of max (top), a congestion signal halves the calls
//     beside them and not them (decreased) — a background limit keeps one
//     call beside them — and while any is held a live call is late only at
//     the slow threshold (lateAfter).
//   - When held slots fill the limit, one call at a time goes over it (a
//     breaker probe at once, any other call once per open duration:
//     acquireProbe), and a healthy answer — this process's, or the fleet's
//     probe (recovered) — lifts the limit to the held slots plus one: the
//     dependency has just shown it has room beside the calls it may still
//     hold. Slow start goes on from there.
//   - The delay rule (Config.LimitDelayTolerance; queueDelay): once per
//     round — the calls sent after the last one, judged once they have
//     all returned — their mean latency against the idle latency. More
//     than the tolerance slower means calls queue at the dependency: the
//     limit comes down to one less than the round's concurrency over the
//     ratio, or to the last calm level if the round's first quarter or
//     half was already clearly queued. Otherwise it grows for the next round to
//     judge, by half until the first queue (slow start), then by one past
//     the level that queue left, once per 24 rounds and half as often
//     after each step that queued again (growRound). Without it, the
//     limit would grow until calls turned late, far past the dependency's
//     capacity.
//
// Waiters are served in FIFO order: a slot freed by a completing call, or
// added by an increase, goes to the caller that has waited longest.
type limiter struct {
	adaptive bool
	min, max int
	backoff  float64
	wait     time.Duration
	// lateFactor × the 99th percentile of recent successful calls' latency
	// (tail) is when a call still in flight is late (see lateAfter); 0
	// turns lateness off. latency is the moving average of successful
	// calls' latency in nanoseconds, 0 until the first: the delay rule's
	// round trip (adapt).
	lateFactor float64
	tail       tail
	latency    atomic.Int64
	// holding counts the slots kept for abandoned calls, len(held), for
	// lateAfter, which reads it without the lock. yields is set for a
	// background policy's limit (Config.Background), which stays quick to
	// call a call late while slots are held: it is the one that gives way.
	holding atomic.Int32
	yields  bool

	mu       sync.Mutex
	limit    int
	inFlight int
	// overdue counts the calls in flight past overdueAfter: while any is,
	// new calls wait for it to return or turn late.
	overdue int
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

	// The delay rule (on when its tolerance is set; see queueDelay and growRound).
	// ssthresh is the level the last queue brought the limit down to (max
	// until the first), and probeRounds how many rounds the limit waits
	// there before its next step past it; sinceRound counts the rounds
	// since the limit last moved. roundEnded is set when a call ends a
	// round, for the grow that follows. sinceGrowth counts healthy calls
	// since the limit last grew. calmLevel is the last limit a round
	// found not queued (0 before the first), and doubt is set when one
	// queued round at a level that had held has not moved it yet.
	delay       queueDelay
	ssthresh    int
	roundEnded  bool
	sinceGrowth int
	sinceRound  int
	probeRounds int
	calmLevel   int
	doubt       bool
	// cutAt is when a congestion signal last cut the limit under the
	// delay rule.
	cutAt time.Time

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
		limit: initial, ssthresh: maxLimit, probeRounds: minProbeRounds, limitGauge: m.limit, inUse: m.inUse, rejected: m.rejected,
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
	if l.overdue == 0 || l.inFlight >= l.limit {
		l.starved = true // an overdue call's hold is no demand past the limit
	}
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
	if l.inFlight >= l.limit || len(l.waiters) > 0 || l.overdue > 0 {
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
	for len(l.waiters) > 0 && l.inFlight < l.limit && l.overdue == 0 {
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
			l.sinceRound = 0
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

// lateAfter is how long a call may be in flight before it is late: a
// congestion signal for the limit, sent before the breaker's slow
// threshold (slow) is reached. It is lateFactor times the 99th percentile
// of the last successful calls' latency (tail), but never sooner than half
// the slow threshold — a fast dependency's scheduling noise is not
// congestion — nor later than it. Judged against what this dependency's
// healthy calls take, a long tail is not congestion: against 1.2 × their
// mean, a fifth of a healthy provider's calls (log-normal, median 120 ms,
// σ 0.8, under the slow threshold) were late, each halving the limit, and
// a third of the orders at 40/s were deferred instead of charged
// (docs/measurements.md, the scenario matrix's rows 2 and 3). For a
// provider answering in 200 ms ± 20 ms, the percentile is ~220 ms and a
// hang is late at ~265 ms. Before minTailSamples calls, or outside the
// adaptive limit, it is slow.
//
// Under the delay rule (a backlog's limit) the baseline stays the moving
// average, which the rule judges a queue by: a backlog's own queued calls
// fill the top of its percentile, and two backlogs judged against it
// stepped past a provider's capacity together with up to 5.6 % of their
// calls above it, against at most 2.3 % judged against the average
// (TestTwoBacklogsShareTheCapacity).
//
// It is slow too while the limit keeps slots for abandoned calls, unless
// it is a background limit (yields): the dependency may still be working
// on those calls after a hang, and is then slower than usual for a
// reason the limit already counts (their slots). The situation is a
// provider recovering from a hang while it finishes the calls given up on:
// its capacity is partly taken by them, so live calls are slower for a
// while without any new congestion. Late at lateFactor, those live calls
// would halve the limit again and again, while the breaker's slow
// threshold still tells a second hang. The scenario matrix's rows after a
// hang (the seed's outage at 20 and 40 req/s, flapping) are where it
// applies; its place has yet to be shown by turning it off there. A background limit's late calls are how the
// backlog gives way to those live calls.
func (l *limiter) lateAfter(slow time.Duration) time.Duration {
	usual := l.tail.percentile99()
	if l.delay.on() {
		usual = time.Duration(l.latency.Load())
	}
	if !l.adaptive || l.lateFactor <= 0 || usual == 0 || (l.holding.Load() > 0 && !l.yields) {
		return slow
	}
	return min(max(time.Duration(float64(usual)*l.lateFactor), slow/2), slow)
}

// overdueAfter is when a call still in flight, late at late, is overdue:
// slower than any usual call, not yet late. From then until late it holds
// new calls back, for half of what lateness allows past the 99th
// percentile latency — (LimitLateFactor − 1) / 2 × the percentile, so from
// 1.1 × it by default, ~20 ms for 200 ms calls — and for no more than half
// the way to late, nor than a caller waits for a slot. It is 0, no hold,
// for a limit without lateness or without a wait, before the percentile, while
// slots are held (a call is late only at the slow threshold then), and
// under the delay rule, whose rounds send many calls at once and judge a
// queue by their latency.
func (l *limiter) overdueAfter(late time.Duration) time.Duration {
	if !l.adaptive || l.lateFactor <= 0 || l.delay.on() || l.holding.Load() > 0 {
		return 0
	}
	p99 := l.tail.percentile99()
	past := time.Duration(float64(p99)*l.lateFactor) - p99 // what lateness allows past the percentile
	hold := min((late-p99)/2, past/2, l.wait)
	if hold <= 0 {
		return 0 // no percentile yet, or no wait
	}
	return late - hold
}

// overdueCall counts a call in flight turning overdue (true) or ending
// that (false: it returned, or turned late or slow), and hands the slots
// its hold kept to waiters once no call is overdue.
func (l *limiter) overdueCall(now bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now {
		l.overdue++
		return
	}
	l.overdue--
	l.grant()
	l.inUse.Set(float64(l.inFlight))
}

// sending gives a call about to be sent its seat in the delay rule's
// round (queueDelay): the zero seat when the rule is off or the round's
// cohort is full.
func (l *limiter) sending() seat {
	if !l.adaptive || !l.delay.on() {
		return seat{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delay.take(l.limit, l.inFlight)
}

// returned tells the limit that a call sent at sent in seat s has
// returned, ok if it succeeded. The delay rule's round counts it; a
// success's latency is also added to the tail lateness is judged against
// and to the moving average (weight 1/8, like TCP's smoothed round-trip
// time, RFC 6298) the delay rule's cuts are spaced by. Every successful
// call counts, late ones too, so a dependency that has become slower for
// good moves the percentile, and with it lateAfter, instead of being
// halved for ever.
func (l *limiter) returned(s seat, sent time.Time, ok bool) {
	now := time.Now()
	d := now.Sub(sent)
	if s.n > 0 {
		l.mu.Lock()
		if l.delay.add(now, s, d, ok) {
			l.roundEnded = true
		}
		l.mu.Unlock()
	}
	if !ok {
		return
	}
	l.tail.add(d)
	for {
		old := l.latency.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if l.latency.CompareAndSwap(old, max(next, 1)) {
			return
		}
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

// adapt moves the limit for signal s and reports whether it changed. Call
// it with l.mu held, the signalling call still counted in flight.
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
		// Under the delay rule a backlog's calls are sent together and
		// turn late together, answering for one excess: they cut the
		// limit once per round trip (the moving average of latency), as
		// TCP reduces its window once per window of losses (RFC 5681).
		// A level no round has found calm that went late is one past
		// capacity: it, less one, caps slow start's way back
		// (ssthresh). Without either, two backlogs sharing a provider
		// stepped past it together, went late together, halved each
		// other to 1 and started again, a fifth of their calls above
		// capacity (TestTwoBacklogsShareTheCapacity). A cut at or below
		// the last calm level says the provider is in trouble (errors,
		// a hang), not where its capacity is, and leaves the measured
		// level alone (TestErrorsDoNotLowerTheMeasuredLevel).
		now := time.Now()
		if l.delay.on() && now.Sub(l.cutAt) < time.Duration(l.latency.Load()) {
			return false
		}
		l.limit = l.decreased()
		if l.limit != old {
			l.cutAt = now
			if l.delay.on() && old > l.calmLevel {
				l.ssthresh = min(l.ssthresh, old-1)
			}
			// The round under way, and one just ended, measured the
			// limit before; the next round measures this one.
			l.delay.restart(true)
			l.roundEnded, l.sinceRound, l.doubt = false, 0, false
		}
	}
	return l.limit != old
}

// decreased is the limit after a congestion signal: backoff times the
// calls it lets in, not times the slots it keeps for abandoned calls
// (releaseAfter). Those calls were sent before this signal and end with
// their hold whatever the limit says: cutting them would only cut the
// live calls beside them, all of them once the held slots are half the
// limit. A limit already full of held slots has no live calls to spare,
// and is cut whole, so that it does not outlive the holds at the size it
// had before a hang. Call it with l.mu held.
//
// A background limit keeps one call beside its held slots (cutFloor).
func (l *limiter) decreased() int {
	if n := len(l.held); n < l.limit {
		return max(l.cutFloor(), n+int(float64(l.limit-n)*l.backoff))
	}
	return max(l.min, int(float64(l.limit)*l.backoff))
}

// cutFloor is the least a cut leaves a limit with live calls beside its
// held slots: min, and for a background limit (yields) one call beside
// those slots. A background limit's late calls, its delay rule's queued
// rounds and the fleet's congestion news are how it gives way to live
// calls beside a provider still busy with calls it held (lateAfter), not
// news of a hang; cut to the held slots alone it would send one call per
// open duration until the holds end (acquireProbe). In the seed outage at
// 40 req/s one reconciliation listing the hang held kept the worker at that
// pace for up to six seconds after the live load had gone. A provider that
// hangs again gets a few more calls than it would without the floor: each
// call beside the held slots is held in its turn, a freed hold's slot goes
// to a waiting call, and the breaker opens on them as on any hang. Call it
// with l.mu held.
func (l *limiter) cutFloor() int {
	if n := len(l.held); l.yields && n < l.limit {
		return max(l.min, n+1)
	}
	return l.min
}

// grow applies a healthy call (see adapt): the lift over held slots, then
// one more slot if the load presses — one per healthy call below ssthresh
// (slow start), one per round trip above it (congestion avoidance). Under
// the delay rule growth from slowStartFrom on is the round's instead
// (growRound).
func (l *limiter) grow() {
	roundEnded := l.roundEnded
	l.roundEnded = false
	l.sinceGrowth++
	l.liftOverHeld()
	// Callers an overdue call holds back wait beside free slots: no demand.
	pressed := l.starved || l.inFlight >= l.limit || (l.overdue == 0 && l.inFlight+len(l.waiters) >= l.limit)
	if l.delay.on() && l.limit >= slowStartFrom {
		if roundEnded {
			l.growRound(pressed)
		}
		return
	}
	if l.limit >= l.top() || !pressed {
		return
	}
	if l.ssthresh < l.max && l.limit >= l.ssthresh && l.sinceGrowth < l.limit {
		return // congestion avoidance: one per round trip
	}
	l.step(l.limit + 1)
}

// growRound is the delay rule's verdict on the round that just ended.
//
// A queue brings the limit down. Past capacity a provider's latency grows
// with every call it holds, the live calls beside this limit's too; this
// limit sees only its own, so its own concurrency over the ratio is the
// most it may keep, and one less leaves the others room for their next
// call. A round whose first quarter or half was already clearly queued
// went past capacity by more than a call or two, and the limit goes back
// to the last level a round found calm, when that is lower: those are the
// calls sent first after a step, which started beside fewer calls than
// the ones after them and read the queue as shorter than it is (paymentsim
// fixes a charge's latency as it starts, as a busy server's queue does).
//
// Without a queue, and with the load pressing, the limit grows for the
// next round to judge: by half until the first queue (slow start, all at
// once, so that the round measures the new level and not the way up to
// it); by half again, up to the last queue's level, when a congestion
// signal halved it below that level (the halving answers a moment, the
// level was measured); and by one past that level once per probeRounds
// rounds. Each step past capacity is a round of calls above it, every one
// of which counts, so the first such step waits minProbeRounds — longer
// than the backlog of a 20-second outage takes to drain — and each step
// that meets the queue again doubles the wait for the next.
func (l *limiter) growRound(pressed bool) {
	l.sinceRound++
	doubt := l.doubt
	l.doubt = false
	if l.delay.queued() {
		// A level at or below the last queue's that held through a round
		// before this one: one round's word is not enough to cut it.
		settled := l.ssthresh < l.max && l.limit <= l.ssthresh && l.sinceRound > 1
		if settled && !l.delay.early && !doubt {
			l.doubt = true
			return
		}
		measured := min(l.limit, int(l.delay.concurrency()+0.5))
		floor := max(l.cutFloor(), l.limit/2)
		target := max(floor, min(l.limit-1, int(float64(measured)/l.delay.ratio()+0.5)-1))
		if l.delay.early && l.calmLevel > 0 {
			target = max(floor, min(target, l.calmLevel))
		}
		if l.ssthresh < l.max && measured <= l.ssthresh+1 {
			l.probeRounds = min(2*l.probeRounds, maxProbeRounds)
		} else {
			l.probeRounds = minProbeRounds
		}
		l.settle(target)
		return
	}
	if l.limit > l.ssthresh && l.limit < l.top() {
		// A step past the last queue's level met none: the level holds.
		l.ssthresh = l.limit
		l.probeRounds = max(minProbeRounds, l.probeRounds/2)
	}
	l.calmLevel = l.limit
	if !pressed || l.limit >= l.top() {
		return
	}
	switch {
	case l.ssthresh >= l.max && l.delay.idleRounds < 2:
		return // slow start judges its steps against two idle rounds
	case l.ssthresh >= l.max:
		l.step(min(l.top(), max(l.limit+1, l.limit*3/2)))
	case l.limit < l.ssthresh:
		l.step(min(l.ssthresh, max(l.limit+1, l.limit*3/2)))
	case l.sinceRound >= l.probeRounds:
		l.step(l.limit + 1)
	default:
		return
	}
	l.delay.restart(false)
	l.sinceRound = 0
}

// settle brings the limit down to level, no higher than it is, and makes
// level the one the next steps are taken from; the next round measures
// the calls the new limit lets through. Call it with l.mu held.
func (l *limiter) settle(level int) {
	l.ssthresh = level
	down := level < l.limit
	l.limit = min(l.limit, level)
	l.delay.restart(down)
	l.sinceRound = 0
}

// top is the highest the limit may grow: max calls waited on, and the
// slots kept for abandoned calls besides them. Those calls hold no
// connection here and no caller waits on them; counting them against max
// would leave a process whose slots a hang filled too few for its live
// load until the holds end. Call it with l.mu held.
func (l *limiter) top() int { return l.max + len(l.held) }

// step raises the limit to n.
func (l *limiter) step(n int) {
	l.limit = n
	l.starved = false
	l.sinceGrowth = 0
}

// current returns the limit and the calls in flight, for tests.
func (l *limiter) current() (limit, inFlight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit, l.inFlight
}
