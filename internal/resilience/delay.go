package resilience

import "time"

// queueDelay tells from successful calls' latency whether calls queue at
// the dependency: the delay signal of TCP Vegas and of Netflix's
// concurrency-limits, which compare the latency now with the latency of an
// idle dependency. A provider past its capacity shares its workers among
// more calls than it has, so every call slows in proportion (paymentsim's
// capacity model); below capacity, latency does not move with concurrency.
//
// As in Vegas, it judges once per round. A round is a cohort: the first
// calls sent after it began, as many as the limit (at least roundMin),
// about one round trip's worth, judged by the mean latency of those that
// succeeded once every one of them has returned — or by its first quarter
// or first half, once those have returned, when they are already clearly
// queued (earlyLooks). A cohort fixed by the order its calls were sent in
// is judged by its slow calls as much as by its fast ones; a call that
// timed out or failed is a congestion signal of its own. The first calls
// to return are the fastest, and a round of whichever returned first
// reads a queue as shorter than it is. One call past a capacity of 16 makes calls
// 6 % slower, while a provider's own jitter (±20 % at paymentsim's
// 100 ms ± 20 ms) moves a 32-call round's mean by 2 %.
//
// The idle latency starts as the mean of the first two rounds, whatever
// the second reads: slow start takes no step before the second ends, so
// it measured no more calls than the first had grown to, and what
// differs between them is the jitter's, not a queue's: a first round
// that drew 5 % fast, taken alone, made the second look queued, and the
// limit settled at half the capacity for a minute. From there it is the
// mean of the rounds that showed no queue (a moving average, 1/8 per
// round), not their lowest: the lowest of a few hundred noisy rounds
// sits three deviations below their mean, and would make a provider at
// its capacity look queued. When no round has looked
// idle for delayBucket, the idle latency becomes the lowest round mean of
// the last two buckets (the windowed minimum of TCP BBR's min_rtt), so a
// provider that became slower for good is taken as it is within 30 s
// instead of looking congested for ever.
//
// It has no lock of its own: the limiter calls it under its mutex.
type queueDelay struct {
	tolerance float64
	// round numbers the rounds, so that a call of a round since dropped
	// (restart) is not counted in the next; size is the cohort's, set
	// when its first call is sent, and seats how many have been sent.
	round       uint64
	size, seats int
	all         cohort                  // the whole cohort
	first       [len(earlyLooks)]cohort // its early looks' parts
	// afterCut is set for a round that began as the limit came down.
	afterCut bool
	// mean is the last round's mean latency, idle the idle latency; both
	// 0 before the first round. idleAt is when a round last looked idle.
	mean, idle time.Duration
	// busyMean is the last round's concurrency, early whether one of its
	// early looks judged it.
	busyMean float64
	early    bool
	idleAt   time.Time
	// idleRounds counts the rounds the idle latency was first taken from,
	// up to 2 (a baseline taken afresh from a bucket's lowest round counts
	// as 2): the first round's mean alone is one draw of the dependency's
	// jitter, and slow start does not step on it alone; its first step
	// waits for the second round (growRound), which joins it.
	idleRounds   int
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
	// down to once per minProbeRounds rounds (some 8 s for a limit of 12
	// at 100 ms a call), and each step that meets the queue again
	// doubles the wait, up to maxProbeRounds: a step past capacity is a
	// round of calls above it.
	minProbeRounds = 24
	maxProbeRounds = 96
)

// seat is a call's place in a round's cohort: its round, and its number
// in the order the round's calls were sent, from 1; the zero seat is
// none.
type seat struct {
	round uint64
	n     int
}

// cohort counts the calls of a round, or of its first part, that have
// returned, and sums the latency of those that succeeded: a failure, a
// decline or a caller who left ends its call without a latency to judge.
// busy sums the calls in flight as each of its calls was sent.
type cohort struct {
	returned, succeeded int
	sum                 time.Duration
	busy                int
}

func (c *cohort) add(d time.Duration, ok bool) {
	c.returned++
	if ok {
		c.succeeded++
		c.sum += d
	}
}

func (c cohort) mean() time.Duration { return c.sum / time.Duration(max(c.succeeded, 1)) }

// take gives a call being sent, with limit the limit and inFlight the
// calls in flight (this one included), its seat in the round's cohort, or
// the zero seat once the cohort is full.
func (q *queueDelay) take(limit, inFlight int) seat {
	if q.seats == 0 {
		q.size = max(limit, roundMin)
	}
	if q.seats >= q.size {
		return seat{}
	}
	q.seats++
	q.all.busy += inFlight
	for i, part := range earlyLooks {
		if q.seats <= q.size/part {
			q.first[i].busy += inFlight
		}
	}
	return seat{round: q.round, n: q.seats}
}

// concurrency is the mean of the calls in flight as the last round's
// calls were sent: what its latency measured.
func (q *queueDelay) concurrency() float64 { return q.busyMean }

// add feeds the return, at now, of a call in seat s that took d, ok if it
// succeeded, and reports whether it ended a round. A call of a round since
// dropped, or sent after its cohort was full, is left out.
func (q *queueDelay) add(now time.Time, s seat, d time.Duration, ok bool) bool {
	if s.n == 0 || s.round != q.round {
		return false
	}
	q.all.add(d, ok)
	judged, early := q.all, false
	if q.all.returned < q.size {
		if q.afterCut {
			return false
		}
		// An early look: the first quarter, then the first half of the
		// calls sent, once all of them are back.
		look := -1
		for i, part := range earlyLooks {
			if s.n <= q.size/part {
				q.first[i].add(d, ok)
				if q.first[i].returned == q.size/part {
					look = i
				}
			}
		}
		if look < 0 || !q.clearlyQueued(q.first[look]) {
			return false
		}
		judged, early = q.first[look], true
	}
	busy := float64(judged.busy) / float64(judged.returned)
	q.restart(false)
	if judged.succeeded == 0 {
		return false // nothing to judge by; the next round will tell
	}
	q.mean, q.busyMean, q.early = judged.mean(), busy, early
	if now.After(q.bucketEndsAt) {
		q.lowBefore, q.lowNow = q.lowNow, q.mean
		q.bucketEndsAt = now.Add(delayBucket)
	}
	q.lowNow = min(q.lowNow, q.mean)
	switch {
	case q.idle == 0:
		q.idle, q.idleAt, q.idleRounds = q.mean, now, 1
	case q.idleRounds == 1:
		q.idle, q.idleAt, q.idleRounds = (q.idle+q.mean)/2, now, 2
	case q.ratio() <= 1+q.tolerance/2:
		q.idle += (q.mean - q.idle) / 8
		q.idleAt = now
	case now.Sub(q.idleAt) > delayBucket:
		q.idle, q.idleAt, q.idleRounds = q.lowNow, now, 2
		if q.lowBefore > 0 {
			q.idle = min(q.idle, q.lowBefore)
		}
	}
	return true
}

// earlyLooks are the parts of a round that may end it before all of its
// calls are back: its first quarter, then its first half, each once all
// of its calls are, if they are slower than idle by earlySlower
// tolerances. Every call a provider past its capacity starts is a call
// over it, so the verdict should not wait for the whole round when its
// first calls leave no doubt. Eight calls' mean moves with the provider's
// jitter by about 4 % (±20 % at 100 ms), sixteen calls' by 3 %: 15 % is
// well past both, and past the 12.5 % that a lone backlog's slow-start
// step from 12 to 18 calls at a capacity of 16 shows, which the whole
// round sizes better. The first calls after a step started beside fewer
// calls than those after them and read a queue as shorter than it is; the
// half catches what the quarter reads too low.
var earlyLooks = [...]int{4, 2}

const earlySlower = 3

// clearlyQueued reports whether the calls c, all returned, are slower than
// idle by more than earlySlower tolerances.
func (q *queueDelay) clearlyQueued(c cohort) bool {
	return q.idle > 0 && c.succeeded > 0 && float64(c.mean()) > float64(q.idle)*(1+earlySlower*q.tolerance)
}

// restart drops the round under way, when a round ended or the limit
// moved: the next round should measure the calls the limit now lets
// through. The calls of this one still in flight are not counted in the
// next. After a cut (down), the calls above the new limit are still at
// the dependency and slow the first calls sent after it: only the whole
// round judges that one, without early looks.
func (q *queueDelay) restart(down bool) {
	q.round++
	q.seats = 0
	q.all, q.first = cohort{}, [len(earlyLooks)]cohort{}
	q.afterCut = down
}

// on reports whether the delay rule is on (Config.LimitDelayTolerance).
func (q *queueDelay) on() bool { return q.tolerance > 0 }

// queued reports whether the last round was more than the tolerance
// slower than the idle latency: calls queue at the dependency.
func (q *queueDelay) queued() bool { return q.ratio() > 1+q.tolerance }

// ratio is the last round's latency over the idle latency: 1 for no
// queue, 1.25 when calls took a quarter longer than they did idle; 1
// before the first round.
func (q *queueDelay) ratio() float64 {
	if q.idle <= 0 {
		return 1
	}
	return float64(q.mean) / float64(q.idle)
}
