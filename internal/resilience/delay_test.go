package resilience

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// sharedProvider is paymentsim's capacity model in small: a call's latency
// is base ± 20 % scaled by n/capacity once the n calls in flight (this one
// included) exceed its capacity, fixed when the call starts. It counts the
// calls started above capacity.
type sharedProvider struct {
	mu            sync.Mutex
	base          time.Duration
	capacity      int
	inFlight      int
	started, over int
	rnd           *rand.Rand
}

func newSharedProvider(base time.Duration, capacity int) *sharedProvider {
	return newSeededProvider(base, capacity, 1)
}

// newSeededProvider is newSharedProvider with its jitter drawn from seed.
func newSeededProvider(base time.Duration, capacity int, seed uint64) *sharedProvider {
	return &sharedProvider{base: base, capacity: capacity, rnd: rand.New(rand.NewPCG(seed, 2))}
}

func (pr *sharedProvider) call(ctx context.Context) (string, error) {
	pr.mu.Lock()
	pr.inFlight++
	pr.started++
	n := pr.inFlight
	d := pr.base + time.Duration((pr.rnd.Float64()*0.4-0.2)*float64(pr.base))
	if n > pr.capacity {
		pr.over++
		d = d * time.Duration(n) / time.Duration(pr.capacity)
	}
	pr.mu.Unlock()
	defer func() {
		pr.mu.Lock()
		pr.inFlight--
		pr.mu.Unlock()
	}()
	select {
	case <-time.After(d):
		return "ch_1", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (pr *sharedProvider) overShare() float64 {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return float64(pr.over) / float64(pr.started)
}

// backlog keeps n callers calling p back to back, as a worker draining a
// backlog does, until stop; it returns how many calls succeeded.
func backlog(p *Policy, pr *sharedProvider, n int) (stop func() int) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	paid := 0
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-quit:
					return
				default:
				}
				if _, err := Do(context.Background(), p, pr.call); err == nil {
					mu.Lock()
					paid++
					mu.Unlock()
				} else {
					// A refused job waits a little, as a snooze does: on
					// the synctest bubble's clock, which the test advances.
					<-time.After(10 * time.Millisecond)
				}
			}
		})
	}
	return func() int { close(quit); wg.Wait(); return paid }
}

// The delay rule stops the limit at the provider's capacity: with a
// backlog of callers pressing on it, calls past capacity queue at the
// provider and slow down, and the limit comes down to end the queue
// instead of growing to its maximum until calls turn late.
func TestTheLimitStopsAtTheProvidersCapacity(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		tolerance     float64
		maxLimit      int
		maxOverShare  float64 // of the calls, started with more than 16 in flight
		minThroughput float64 // calls/s, of the 160/s 16 × 100 ms allow
	}{
		{0.05, 18, 0.08, 145},
		{0, 40, 1, 0}, // without it: the limit climbs past capacity (checked below)
	} {
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, func(c *Config) {
				c.MaxAttempts = 1
				c.LimitMax = 40
				c.LimitDelayTolerance = tt.tolerance
				c.BulkheadWait = time.Second
			})
			pr := newSharedProvider(100*time.Millisecond, 16)
			stop := backlog(b.p, pr, 40)
			advance(2 * time.Second) // find the capacity
			highest := 0
			for range 100 { // 10 s
				advance(100 * time.Millisecond)
				highest = max(highest, b.limit())
			}
			paid := stop()
			share := pr.overShare()
			t.Logf("tolerance %v: limit at most %d over the last 10 s, %.0f %% of calls started above capacity, %.0f calls/s",
				tt.tolerance, highest, 100*share, float64(paid)/12)
			if tt.tolerance == 0 {
				if highest <= tt.maxLimit-10 {
					t.Errorf("without the delay rule the limit stayed at %d: the test shows nothing", highest)
				}
				return
			}
			if highest > tt.maxLimit {
				t.Errorf("limit reached %d, want at most %d (capacity 16)", highest, tt.maxLimit)
			}
			if share > tt.maxOverShare {
				t.Errorf("%.0f %% of calls started above capacity, want at most %.0f %%: the limit must find the capacity without living past it",
					100*share, 100*tt.maxOverShare)
			}
			if got := float64(paid) / 12; got < tt.minThroughput {
				t.Errorf("%.0f calls/s, want at least %.0f: the limit must use the capacity, not only spare it", got, tt.minThroughput)
			}
		})
	}
}

// Live first: a backlog drained under the delay rule beside live calls
// without it, on one provider of capacity 16, as the worker and checkout
// share the payment provider after an outage. The backlog's limit comes
// down to leave the live calls their room — none is refused or fails —
// while the backlog takes most of what is left. It does cross the
// capacity now and then: 30 live calls a second hold 2 to 4 calls in
// flight, and one call past 16 among that variation reads as less than
// the tolerance. Six draws of the provider's jitter: 4.0–6.8 % of calls
// above capacity (8 to 37 % before rounds that are neither idle nor queued
// stepped the limit back, clearly queued rounds ended early, and a queue
// left one call of room beside the backlog), against 60 % and more without
// the rule, the last case.
func TestTheBacklogLeavesLiveCallsTheirShare(t *testing.T) {
	t.Parallel()
	type run struct {
		tolerance float64
		seed      uint64
	}
	runs := []run{{0.05, 1}, {0.05, 2}, {0.05, 3}, {0.05, 4}, {0.05, 5}, {0.05, 6}, {0, 1}}
	for _, r := range runs {
		tolerance := r.tolerance
		synctest.Test(t, func(t *testing.T) {
			worker := setup(t, func(c *Config) {
				c.MaxAttempts = 1
				c.LimitInitial = 1
				c.LimitMax = 32
				c.LimitDelayTolerance = tolerance
				c.BulkheadWait = 2 * time.Second
			})
			live := setup(t, func(c *Config) { c.MaxAttempts = 1 })
			pr := newSeededProvider(100*time.Millisecond, 16, r.seed)
			stop := backlog(worker.p, pr, 32)

			// 30 live calls a second, each on its own, as orders arrive.
			var wg sync.WaitGroup
			var mu sync.Mutex
			sent, failed := 0, 0
			quit := make(chan struct{})
			wg.Go(func() {
				tick := time.NewTicker(time.Second / 30)
				defer tick.Stop()
				for {
					select {
					case <-quit:
						return
					case <-tick.C:
					}
					wg.Go(func() {
						_, err := Do(context.Background(), live.p, pr.call)
						mu.Lock()
						sent++
						if err != nil {
							failed++
						}
						mu.Unlock()
					})
				}
			})
			advance(10 * time.Second)
			close(quit)
			paid := stop()
			wg.Wait()
			share := pr.overShare()
			backlogRate := float64(paid) / 10
			t.Logf("tolerance %v, seed %d: live %d sent, %d failed; backlog %.0f calls/s of the 130/s left; %.1f %% of calls started above capacity",
				tolerance, r.seed, sent, failed, backlogRate, 100*share)
			if tolerance == 0 {
				if share < 0.4 {
					t.Errorf("without the delay rule only %.1f %% of calls started above capacity: the test shows nothing", 100*share)
				}
				return
			}
			if failed > 0 {
				t.Errorf("%d of %d live calls failed: the backlog must leave them their room", failed, sent)
			}
			if share > 0.08 {
				t.Errorf("seed %d: %.1f %% of calls started above capacity, want at most 8 %%", r.seed, 100*share)
			}
			if backlogRate < 85 {
				t.Errorf("seed %d: the backlog got %.0f calls/s, want at least 85 of the 130 left", r.seed, backlogRate)
			}
		})
	}
}
