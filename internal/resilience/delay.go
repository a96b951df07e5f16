package resilience

import "time"

// queueDelay tells from successful calls' latency whether calls queue at
// the dependency: the delay signal of TCP Vegas and of Netflix's
// concurrency-limits, which compare the latency now with the latency of an
// idle dependency. A provider past its capacity shares its workers among
// more calls than it has, so every call slows in proportion (paymentsim's
// capacity model); below capacity, latency does not move with concurrency.
//
// As in Vegas, it judges once per round: a round is as many successful
// calls as the limit (at least roundMin), about one round trip's worth —
// or a quarter of that when those are already clearly queued
// (clearlyQueued) — and its mean latency is the latency now. One call past a capacity of 16
// makes calls 6 % slower, while a provider's own jitter (±20 % at
// paymentsim's 100 ms ± 20 ms) moves a 32-call round's mean by 2 %.
//
// The idle latency is the mean of the rounds that showed no queue (a
// moving average, 1/8 per round), not their lowest: the lowest of a few
// hundred noisy rounds sits three deviations below their mean, and would
// make a provider at its capacity look queued. When no round has looked
// idle for delayBucket, the idle latency becomes the lowest round mean of
// the last two buckets (the windowed minimum of TCP BBR's min_rtt), so a
// provider that became slower for good is taken as it is within 30 s
// instead of looking congested for ever.
//
// It has no lock of its own: the limiter calls it under its mutex.
type queueDelay struct {
	tolerance float64
	since     time.Time     // when this round began
	sum       time.Duration // this round's latencies so far
	calls     int
	// mean is the last round's mean latency, idle the idle latency; both
	// 0 before the first round. idleAt is when a round last looked idle.
	mean, idle   time.Duration
	idleAt       time.Time
	lowNow       time.Duration // lowest round mean in the current bucket
	lowBefore    time.Duration // lowest round mean in the bucket before, 0 if none
	bucketEndsAt time.Time
}

const (
	roundMin = 32
	// slowStartFrom is the limit from which slow start under the delay
	// rule waits for a round's verdict after each half: fewer calls than
	// half a capacity-16 provider's are too few to queue.
	slowStartFrom = 8
	delayBucket   = 15 * time.Second
	// Once a queue was seen, the limit steps past the level it came
	// down to once per minProbeRounds round trips, and each step that
	// meets the queue again doubles the wait, up to maxProbeRounds: a
	// step past capacity is a round of calls above it.
	minProbeRounds = 8
	maxProbeRounds = 64
)

// add feeds the latency of one successful call sent at sent, at now, with
// size the calls a round needs (the limit), and reports whether it ended a
// round. A call sent before the round began measured the concurrency of
// before, and is left out.
func (q *queueDelay) add(now, sent time.Time, size int) bool {
	if sent.Before(q.since) {
		return false
	}
	q.sum += now.Sub(sent)
	q.calls++
	if n := max(size, roundMin); q.calls < n && !q.clearlyQueued(n) {
		return false
	}
	q.mean = q.sum / time.Duration(q.calls)
	q.sum, q.calls = 0, 0
	q.since = now
	if now.After(q.bucketEndsAt) {
		q.lowBefore, q.lowNow = q.lowNow, q.mean
		q.bucketEndsAt = now.Add(delayBucket)
	}
	q.lowNow = min(q.lowNow, q.mean)
	switch {
	case q.idle == 0:
		q.idle, q.idleAt = q.mean, now
	case q.ratio() <= 1+q.tolerance/2:
		q.idle += (q.mean - q.idle) / 8
		q.idleAt = now
	case now.Sub(q.idleAt) > delayBucket:
		q.idle, q.idleAt = q.lowNow, now
		if q.lowBefore > 0 {
			q.idle = min(q.idle, q.lowBefore)
		}
	}
	return true
}

// clearlyQueued reports whether the round under way, a quarter or more of
// its n calls in, is already slower than idle by twice the tolerance: it
// ends there. Every call a provider past its capacity starts is a call
// over it, so the verdict should not wait for the whole round when its
// first calls leave no doubt; eight calls' mean moves with the provider's
// jitter by about 4 % (±20 % at 100 ms), and twice the tolerance, 10 %,
// is well past that.
func (q *queueDelay) clearlyQueued(n int) bool {
	if q.idle <= 0 || q.calls < n/4 {
		return false
	}
	mean := q.sum / time.Duration(q.calls)
	return float64(mean) > float64(q.idle)*(1+2*q.tolerance)
}

// restart drops the round under way at now: the limit has just come
// down, and the next round should measure the calls the new limit lets
// through.
func (q *queueDelay) restart(now time.Time) { q.sum, q.calls, q.since = 0, 0, now }

// on reports whether the delay rule is on (Config.LimitDelayTolerance).
func (q *queueDelay) on() bool { return q.tolerance > 0 }

// queued reports whether the last round was more than the tolerance
// slower than the idle latency: calls queue at the dependency.
func (q *queueDelay) queued() bool { return q.ratio() > 1+q.tolerance }

// warm reports whether the last round was neither idle nor queued: slower
// than the idle latency by more than half the tolerance (the most an idle
// round may be, see add) but not by more than the tolerance.
func (q *queueDelay) warm() bool {
	r := q.ratio()
	return r > 1+q.tolerance/2 && r <= 1+q.tolerance
}

// ratio is the last round's latency over the idle latency: 1 for no
// queue, 1.25 when calls took a quarter longer than they did idle; 1
// before the first round.
func (q *queueDelay) ratio() float64 {
	if q.idle <= 0 {
		return 1
	}
	return float64(q.mean) / float64(q.idle)
}
