package resilience

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

// warm makes n sequential calls that each take latency, so the 99th
// percentile of the limit's recent latencies is exactly latency (n at
// least minTailSamples).
func warm(t *testing.T, b bundle, pr *provider, latency time.Duration, n int) {
	t.Helper()
	pr.set(latency)
	for range n {
		if _, err := Do(context.Background(), b.p, pr.call); err != nil {
			t.Fatalf("warm-up call: %v", err)
		}
	}
}

func TestLateCallShrinksTheLimitBeforeTheBreakerHearsOfIt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		factor   float64
		shrinkAt time.Duration
	}{
		{"late at 1.5 × the percentile", 1.5, 300 * time.Millisecond},
		{"factor 0: at the slow threshold", 0, 400 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, func(c *Config) { c.MaxAttempts, c.LimitLateFactor = 1, tt.factor })
				pr := &provider{}
				warm(t, b, pr, 200*time.Millisecond, 5)
				before := b.limit()

				pr.set(0) // hangs from now on
				go func() { _, _ = Do(context.Background(), b.p, pr.call) }()
				advance(tt.shrinkAt - time.Millisecond)
				if got := b.limit(); got != before {
					t.Fatalf("%v in: limit = %d, want %d still", tt.shrinkAt-time.Millisecond, got, before)
				}
				advance(2 * time.Millisecond)
				if got, want := b.limit(), max(before/2, 1); got != want {
					t.Errorf("%v in: limit = %d, want %d (halved)", tt.shrinkAt+time.Millisecond, got, want)
				}
				if tt.shrinkAt < 400*time.Millisecond {
					if got := b.calls(t, outcomeSlow); got != 0 {
						t.Errorf("late, before the slow threshold: the breaker counted %d slow calls, want 0", got)
					}
				}
				advance(400*time.Millisecond - tt.shrinkAt)
				if got := b.calls(t, outcomeSlow); got != 1 {
					t.Errorf("past the slow threshold: slow calls = %d, want 1", got)
				}
				if got, want := b.limit(), max(before/2, 1); got != want {
					t.Errorf("past the slow threshold: limit = %d, want %d (one call, one halving)", got, want)
				}
				advance(time.Second) // the call times out
			})
		})
	}
}

// succeed tells l of n successful calls that each took d.
func succeed(l *limiter, d time.Duration, n int) {
	for range n {
		l.returned(seat{}, time.Now().Add(-d), true)
	}
}

func TestLateAfterFollowsThePercentileWithinBounds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testLateAfterFollowsThePercentileWithinBounds)
}

func testLateAfterFollowsThePercentileWithinBounds(t *testing.T) {
	l := newAdaptiveLimiter(4, 1, 20, 0.5, 0, testLimiterMetrics())
	l.lateFactor = 1.5
	slow := 400 * time.Millisecond
	succeed(l, 200*time.Millisecond, minTailSamples-1)
	if got := l.lateAfter(slow); got != slow {
		t.Errorf("%d calls: lateAfter = %v, want the slow threshold", minTailSamples-1, got)
	}
	succeed(l, 200*time.Millisecond, 1)
	if got, want := l.lateAfter(slow), 300*time.Millisecond; got != want {
		t.Errorf("200 ms calls: lateAfter = %v, want %v", got, want)
	}
	// While a slot is kept for an abandoned call, the dependency may still
	// be busy with it: a call is late only at the slow threshold.
	if err := l.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.releaseAfter(noSignal, time.Second)
	if got := l.lateAfter(slow); got != slow {
		t.Errorf("a slot held: lateAfter = %v, want the slow threshold", got)
	}
	advance(time.Second)
	if got, want := l.lateAfter(slow), 300*time.Millisecond; got != want {
		t.Errorf("the hold over: lateAfter = %v, want %v", got, want)
	}
	// A background limit is the one that gives way: held slots or not.
	bg := newAdaptiveLimiter(4, 1, 20, 0.5, 0, testLimiterMetrics())
	bg.lateFactor, bg.yields = 1.5, true
	succeed(bg, 200*time.Millisecond, minTailSamples)
	if err := bg.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	bg.releaseAfter(noSignal, time.Second)
	if got, want := bg.lateAfter(slow), 300*time.Millisecond; got != want {
		t.Errorf("background, a slot held: lateAfter = %v, want %v", got, want)
	}
	advance(time.Second)
	// The provider became slower for good: the percentile follows, and its
	// calls stop being late instead of halving the limit for ever.
	succeed(l, 350*time.Millisecond, 5)
	if got := l.lateAfter(slow); got != slow {
		t.Errorf("recent calls ~350 ms: lateAfter = %v, want the slow threshold (capped)", got)
	}
	// A provider answering in a millisecond: noise is not congestion.
	fast := newAdaptiveLimiter(4, 1, 20, 0.5, 0, testLimiterMetrics())
	fast.lateFactor = 1.5
	succeed(fast, time.Millisecond, minTailSamples)
	if got, want := fast.lateAfter(slow), slow/2; got != want {
		t.Errorf("1 ms calls: lateAfter = %v, want %v (half the slow threshold)", got, want)
	}
}

// TestALongTailIsNotLate: a healthy provider whose latency has a long
// tail — log-normal, median 120 ms, σ 0.5 and 0.8, capped at 380 ms, under
// the 400 ms slow threshold, as rows 2 and 3 of the scenario matrix — has
// at most one call in 2000 judged late with the default factor (while the
// window holds a few hundred calls, its percentile is a little low).
// Against 1.2 × the mean latency a fifth of them were, each halving the
// limit. A provider
// answering in 200 ms ± 20 ms is still late about where it was, a little
// past 1.2 × its mean.
func TestALongTailIsNotLate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		slow := 400 * time.Millisecond
		for _, tt := range []struct {
			name     string
			draw     func(*rand.Rand) time.Duration
			wantLate time.Duration // 0: none late, whatever the latency
		}{
			{"log-normal σ 0.5", logNormal(120*time.Millisecond, 0.5, 380*time.Millisecond), 0},
			{"log-normal σ 0.8", logNormal(120*time.Millisecond, 0.8, 380*time.Millisecond), 0},
			{"200 ms ± 20 ms", func(r *rand.Rand) time.Duration {
				return 180*time.Millisecond + time.Duration(r.Int64N(int64(40*time.Millisecond)))
			}, 270 * time.Millisecond},
		} {
			r := rand.New(rand.NewPCG(1, 2))
			l := newAdaptiveLimiter(4, 1, 20, 0.5, 100*time.Millisecond, testLimiterMetrics())
			l.lateFactor = DefaultConfig().LimitLateFactor
			late := 0
			for i := range 2000 {
				d := tt.draw(r)
				if i >= 20 && d > l.lateAfter(slow) {
					late++
				}
				succeed(l, d, 1)
			}
			if late > 1 {
				t.Errorf("%s: %d of 1980 calls late (late at %v), want at most 1", tt.name, late, l.lateAfter(slow))
			}
			if tt.wantLate > 0 {
				if got := l.lateAfter(slow); got < 240*time.Millisecond || got > tt.wantLate {
					t.Errorf("%s: a hang is late at %v, want 240 ms to %v", tt.name, got, tt.wantLate)
				}
			}
		}
	})
}

// logNormal draws latencies with the given median and σ, capped.
func logNormal(median time.Duration, sigma float64, limit time.Duration) func(*rand.Rand) time.Duration {
	return func(r *rand.Rand) time.Duration {
		return min(time.Duration(float64(median)*math.Exp(sigma*r.NormFloat64())), limit)
	}
}

func TestLateCallsAreAnnouncedAtMostOnceASecond(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
		pr := &provider{}
		warm(t, b, pr, 200*time.Millisecond, 5)
		pr.set(0)
		congested := func() int {
			n := 0
			for _, e := range b.p.TakeEvents() {
				if e.Kind == EventCongested {
					n++
				}
			}
			return n
		}
		for range 3 { // three hung calls, 100 ms apart: late at 300, 400, 500 ms
			go func() { _, _ = Do(context.Background(), b.p, pr.call) }()
			advance(100 * time.Millisecond)
		}
		advance(time.Second)
		if got := congested(); got != 1 {
			t.Errorf("congested events for three late calls within a second = %d, want 1", got)
		}
		go func() { _, _ = Do(context.Background(), b.p, pr.call) }()
		advance(time.Second)
		if got := congested(); got != 1 {
			t.Errorf("a late call over a second later: congested events = %d, want 1", got)
		}
	})
}

func TestCongestedFromElsewhereShrinksTheLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		before := b.limit()
		b.p.Congested()
		if got, want := b.limit(), max(before/2, 1); got != want {
			t.Errorf("limit after Congested = %d, want %d", got, want)
		}
		if got := b.p.TakeEvents(); len(got) != 0 {
			t.Errorf("events after Congested = %v, want none (no echo back to the fleet)", got)
		}
	})
}

// TestCongestedFromElsewhereAtMostOncePerSecond: news of late calls from
// many processes lowers the limit once per second however many send it, so
// the size of the fleet does not multiply what each receiver believes; the
// receiver's own late calls still lower it at once.
func TestCongestedFromElsewhereAtMostOncePerSecond(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.LimitInitial, c.LimitMax = 16, 32 })
		for range 10 { // ten processes, each announcing once this second
			b.p.Congested()
		}
		if got := b.limit(); got != 8 {
			t.Errorf("limit after ten processes' news within a second = %d, want 8 (halved once)", got)
		}
		advance(999 * time.Millisecond)
		if b.p.Congested() {
			t.Error("news 999ms after the last decrease moved the limit, want it ignored")
		}
		advance(time.Millisecond)
		if !b.p.Congested() {
			t.Error("news a second after the last decrease was ignored, want the limit halved")
		}
		if got := b.limit(); got != 4 {
			t.Errorf("limit a second later = %d, want 4", got)
		}
	})
}

// TestAnOverdueCallHoldsNewCallsBack: a call in flight past 1.1 × the
// usual latency holds new calls until it returns or turns late. The hang
// below starts with the limit at 8, so only the hold keeps the sixth
// call, sent 230 ms in (the save before it was quicker than the first
// one's), out of a provider that holds every call it gets.
func TestAnOverdueCallHoldsNewCallsBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts, c.LimitInitial = 1, 8 })
		pr := &provider{}
		warm(t, b, pr, 200*time.Millisecond, 5) // late at 240 ms, overdue at 220

		pr.set(0) // hangs from now on
		send := func() <-chan error {
			errc := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				_, err := Do(ctx, b.p, pr.call)
				errc <- err
			}()
			return errc
		}
		for i := range 5 {
			send()
			advance([]time.Duration{50, 50, 50, 50, 30}[i] * time.Millisecond)
		}
		sixth := send() // 230 ms in
		advance(time.Millisecond)
		if got, _ := pr.counts(); got != 5 {
			t.Fatalf("231 ms into the hang: the provider holds %d calls, want 5 (the sixth waits behind the overdue first)", got)
		}
		advance(9 * time.Millisecond) // the first is late: the limit is cut below the calls held
		if got := b.limit(); got >= 5 {
			t.Fatalf("240 ms in: limit = %d, want below the 5 calls held", got)
		}
		select {
		case err := <-sixth:
			if !errors.Is(err, ErrBulkheadFull) {
				t.Errorf("sixth call: %v, want ErrBulkheadFull", err)
			}
		case <-time.After(200 * time.Millisecond):
			t.Error("sixth call still waiting after its bulkhead wait")
		}
		if got, _ := pr.counts(); got != 5 {
			t.Errorf("the provider holds %d calls, want 5", got)
		}
		advance(3 * time.Second) // every call times out
	})
}

// TestAnOverdueCallsHoldEndsWithIt: a call behind a slow outlier waits
// only until the outlier returns, or turns late and has cut the limit.
func TestAnOverdueCallsHoldEndsWithIt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		outlier   time.Duration // 0: it hangs
		sentAfter time.Duration // the call behind it, from 225 ms on
		limit     int
	}{
		{"it returns at 230 ms", 230 * time.Millisecond, 5 * time.Millisecond, 8},
		{"it turns late at 240 ms", 0, 15 * time.Millisecond, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, func(c *Config) { c.MaxAttempts, c.LimitInitial = 1, 8 })
				pr := &provider{}
				warm(t, b, pr, 200*time.Millisecond, 5) // overdue at 220 ms, late at 240

				pr.set(tt.outlier)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() { _, _ = Do(ctx, b.p, pr.call) }()
				advance(225 * time.Millisecond)
				pr.set(200 * time.Millisecond)
				start := time.Now()
				var sentAfter time.Duration
				_, err := Do(context.Background(), b.p, func(ctx context.Context) (string, error) {
					sentAfter = time.Since(start)
					return pr.call(ctx)
				})
				if err != nil {
					t.Fatalf("the call behind the outlier: %v", err)
				}
				if sentAfter != tt.sentAfter {
					t.Errorf("the call behind the outlier went %v after it was made, want %v", sentAfter, tt.sentAfter)
				}
				if got := b.limit(); got != tt.limit {
					t.Errorf("limit = %d, want %d: the hold is neither congestion nor demand", got, tt.limit)
				}
			})
		})
	}
}

// TestOverdueHoldsBrieflyWhereAHoldBelongs: a call is overdue (LimitLateFactor
// − 1) / 2 × the 99th percentile latency before it is late — 1.1 × the
// percentile at 1.2 — for no longer than half the way to late or than a caller waits,
// and nowhere a hold would get in the way: not with lateness off, not
// without a wait, not while slots are held (a live call is late only at
// the slow threshold then), not for a backlog's limit under the delay
// rule, whose rounds send many calls at once.
func TestOverdueHoldsBrieflyWhereAHoldBelongs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		slow := 400 * time.Millisecond
		live := func(avg, wait time.Duration, factor float64) *limiter {
			l := newAdaptiveLimiter(4, 1, 20, 0.5, wait, testLimiterMetrics())
			l.lateFactor = factor
			if avg > 0 {
				succeed(l, avg, minTailSamples)
			}
			return l
		}
		wait := 100 * time.Millisecond
		for _, tt := range []struct {
			name string
			l    *limiter
			want time.Duration
		}{
			{"200 ms calls, late at 240 ms", live(200*time.Millisecond, wait, 1.2), 220 * time.Millisecond},
			{"late factor 1.5: late at 300 ms", live(200*time.Millisecond, wait, 1.5), 250 * time.Millisecond},
			{"a 10 ms wait", live(200*time.Millisecond, 10*time.Millisecond, 1.5), 290 * time.Millisecond},
			// Late at half the slow threshold, 200 ms, far past 1.2 × 5 ms:
			// the hold is still 0.1 × the percentile, not half of 195 ms.
			{"5 ms calls", live(5*time.Millisecond, wait, 1.2), 200*time.Millisecond - 500*time.Microsecond},
			// Late at the slow threshold, short of 1.2 × 380 ms: half the
			// way there.
			{"380 ms calls", live(380*time.Millisecond, wait, 1.2), 390 * time.Millisecond},
			{"no percentile yet", live(0, wait, 1.2), 0},
			{"lateness off", live(200*time.Millisecond, wait, 0), 0},
			{"no wait", live(200*time.Millisecond, 0, 1.2), 0},
		} {
			if got := tt.l.overdueAfter(tt.l.lateAfter(slow)); got != tt.want {
				t.Errorf("%s: overdue at %v, want %v", tt.name, got, tt.want)
			}
		}
		held := live(200*time.Millisecond, wait, 1.2)
		if err := held.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		held.releaseAfter(noSignal, time.Second)
		if got := held.overdueAfter(held.lateAfter(slow)); got != 0 {
			t.Errorf("a slot held: overdue at %v, want 0", got)
		}
		backlog := live(200*time.Millisecond, wait, 1.2)
		backlog.delay.tolerance = 0.05
		if got := backlog.overdueAfter(backlog.lateAfter(slow)); got != 0 {
			t.Errorf("the delay rule on: overdue at %v, want 0", got)
		}
		advance(time.Second)
	})
}

// TestCallsHeldBackAreNoDemand: callers an overdue call holds back wait
// beside free slots, and a healthy call that returns meanwhile does not
// take them for load the limit held back.
func TestCallsHeldBackAreNoDemand(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 }) // the limit starts at 4
		pr := &provider{}
		warm(t, b, pr, 200*time.Millisecond, 5) // overdue at 220 ms, late at 240
		call := func(d time.Duration) {
			go func() {
				_, _ = Do(context.Background(), b.p, func(ctx context.Context) (string, error) {
					select {
					case <-time.After(d):
						return "ch_1", nil
					case <-ctx.Done():
						return "", ctx.Err()
					}
				})
			}()
		}
		call(230 * time.Millisecond) // overdue from 220 ms, back at 230
		advance(25 * time.Millisecond)
		call(200 * time.Millisecond) // back at 225 ms, during the hold
		advance(196 * time.Millisecond)
		call(200 * time.Millisecond) // 221 ms: held back, two slots free
		call(200 * time.Millisecond)
		advance(time.Second)
		if got := b.limit(); got != 4 {
			t.Errorf("limit = %d, want 4: two callers held beside two free slots are no demand", got)
		}
	})
}
