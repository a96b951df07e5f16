package resilience

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// holdSetup is setup with the default 10 s abandoned-call hold, one attempt
// per call and room for ten calls at once, so ten hung calls can fill the
// breaker's window.
func holdSetup(t *testing.T) bundle {
	t.Helper()
	return setup(t, func(c *Config) {
		c.MaxAttempts = 1
		c.AbandonedHold = DefaultConfig().AbandonedHold
		c.LimitInitial, c.LimitMin, c.LimitMax = 10, 10, 10
	})
}

// hangTen sends ten calls that hang, one every 50 ms from now, and returns
// once every one has timed out (500 ms each), the last sent 450 ms in.
func hangTen(t *testing.T, b bundle) { hangN(t, b, 10) }

// hangN is hangTen with n calls.
func hangN(t *testing.T, b bundle, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		if i > 0 {
			advance(50 * time.Millisecond)
		}
		wg.Go(func() {
			if _, err := b.do(hang); !errors.Is(err, ErrTimeout) {
				t.Errorf("hung call %d: err = %v, want ErrTimeout", i, err)
			}
		})
	}
	wg.Wait()
}

// hungAndOpen is holdSetup with the adaptive limit, starting at 8: eight
// calls hang, one every 50 ms (the first is late at 400 ms and halves the
// limit, with all eight out), and once they have timed out every slot is
// held for them, so the refusals that follow open the breaker. It returns
// when the breaker opened.
func hungAndOpen(t *testing.T) (bundle, time.Time) {
	t.Helper()
	b := setup(t, func(c *Config) {
		c.MaxAttempts = 1
		c.AbandonedHold = DefaultConfig().AbandonedHold
		c.LimitInitial = 8
	})
	hangN(t, b, 8)
	for i := 0; b.p.State() != StateOpen; i++ {
		if i == 10 {
			t.Fatalf("breaker still %v after %d refusals", b.p.State(), i)
		}
		if _, err := b.do(ok); !errors.Is(err, ErrBulkheadFull) {
			t.Fatalf("err = %v, want ErrBulkheadFull", err)
		}
	}
	return b, time.Now()
}

// The slots of calls a hung provider may still hold stay taken for the
// hold, but they do not keep the breaker open: its probe goes at the
// normal open time, one over the limit, and a fast answer lifts the limit
// above the held slots, so calls flow again at once — within the limit the
// held slots leave.
func TestAProbeGoesAtTheOpenTimeOverTheHeldSlots(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, opened := hungAndOpen(t)
		limit, inFlight := b.p.limit.current()
		if inFlight != 8 || limit >= inFlight {
			t.Fatalf("limit %d, slots taken %d: want all eight held, over the shrunk limit", limit, inFlight)
		}
		// The plain 1 s open state, not the hold.
		if got, want := b.p.RetryAfter(), time.Until(opened.Add(time.Second)); got != want {
			t.Errorf("RetryAfter = %v, want %v (the open state, not the 10 s hold)", got, want)
		}
		for _, ev := range b.p.TakeEvents() {
			if ev.Kind == EventOpened && ev.OpenFor != time.Second {
				t.Errorf("opening %+v, want it for the 1 s open state: the fleet must not hear the hold", ev)
			}
		}
		advance(time.Second + time.Nanosecond) // gobreaker's expiry is exclusive
		if got := b.p.RetryAfter(); got != 0 {
			t.Errorf("half-open with every slot held: RetryAfter = %v, want 0 (a probe may go)", got)
		}
		// Three probes, one at a time over the limit at first.
		for i := range 3 {
			if _, err := b.do(ok); err != nil {
				t.Fatalf("probe %d: %v", i, err)
			}
		}
		if got := b.p.State(); got != StateClosed {
			t.Fatalf("after three good probes: state = %v, want closed", got)
		}
		limit, inFlight = b.p.limit.current()
		if inFlight != 8 || limit <= inFlight {
			t.Errorf("limit %d with %d slots held: want it lifted above them", limit, inFlight)
		}
		// Calls go again while the hung ones are still held.
		for i := range 5 {
			if _, err := b.do(ok); err != nil {
				t.Errorf("call %d after the probes: %v", i, err)
			}
		}
	})
}

// While a probe holds the slot over a full limit, the others wait for its
// verdict: they are refused (ErrBulkheadFull) without counting as a
// failure, which would open the breaker again.
func TestOnlyOneProbeAtATimeOverTheHeldSlots(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, _ := hungAndOpen(t)
		advance(time.Second + time.Nanosecond) // half-open
		g := make(gated, 1)
		first := make(chan error, 1)
		go func() {
			_, err := Do(context.Background(), b.p, g.call)
			first <- err
		}()
		synctest.Wait()
		if _, err := b.do(ok); !errors.Is(err, ErrBulkheadFull) {
			t.Fatalf("second probe while the first is out: err = %v, want ErrBulkheadFull", err)
		}
		if got := b.p.State(); got != StateHalfOpen {
			t.Errorf("state = %v after the second probe was refused, want still half-open", got)
		}
		g <- nil
		if err := <-first; err != nil {
			t.Fatalf("first probe: %v", err)
		}
		if _, err := b.do(ok); err != nil {
			t.Errorf("after the first probe answered: %v, want the next probe made", err)
		}
	})
}

func TestHoldOffOpensForTheOpenDuration(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts, c.LimitInitial, c.LimitMin, c.LimitMax = 1, 10, 10, 10 })
		hangTen(t, b)
		// Tripped at 850 ms, now 950 ms: 1 s open leaves 900 ms.
		if got, want := b.p.RetryAfter(), 900*time.Millisecond; got != want {
			t.Errorf("RetryAfter = %v, want %v", got, want)
		}
	})
}

func TestAnsweredSlowCallsHoldNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := holdSetup(t)
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { _, _ = b.do(slowOK) }) // slow, but answered at 450 ms
		}
		wg.Wait()
		if got := b.p.State(); got != StateOpen {
			t.Fatalf("state = %v, want open (ten slow calls)", got)
		}
		// Tripped at 400 ms, now 450 ms: the plain 1 s open state.
		if got, want := b.p.RetryAfter(), 950*time.Millisecond; got != want {
			t.Errorf("RetryAfter = %v, want %v: answered calls leave nothing with the provider", got, want)
		}
	})
}

// A fleet probe that hangs is reported as a failed probe, and nothing
// else: no opening goes out for the slot it keeps.
func TestAHungFleetProbeIsReportedFailed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := holdSetup(t)
		// The fleet is half-open and this process holds the probe lease.
		b.p.Impose(Imposed{Source: SourceFleet, HoldFor: 5 * time.Second, Probes: 3})
		if _, err := b.do(hang); !errors.Is(err, ErrTimeout) {
			t.Fatalf("probe err = %v, want ErrTimeout", err)
		}
		var got []Event
		for _, ev := range b.p.TakeEvents() {
			if ev.Kind == EventOpened || ev.Kind == EventProbeFailed {
				got = append(got, ev)
			}
		}
		if len(got) != 1 || got[0].Kind != EventProbeFailed {
			t.Fatalf("events = %+v, want one failed probe", got)
		}
		// The local breaker saw one failure and stays closed: once the
		// fleet lets go, this process calls again.
		b.p.Release()
		if _, err := b.do(ok); err != nil {
			t.Errorf("after the fleet released: err = %v, want the call made", err)
		}
	})
}

func TestAbandonedCallsKeepTheirSlots(t *testing.T) {
	t.Parallel()
	for _, hold := range []time.Duration{0, 10 * time.Second} {
		t.Run(hold.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, func(c *Config) {
					c.MaxAttempts, c.AbandonedHold = 1, hold
					c.LimitInitial, c.LimitMin, c.LimitMax = 2, 2, 2
				})
				start := time.Now()
				var wg sync.WaitGroup
				for range 2 {
					wg.Go(func() { _, _ = b.do(hang) }) // both time out at 500 ms
				}
				wg.Wait()
				advance(100 * time.Millisecond)
				_, err := b.do(ok)
				if hold == 0 {
					if err != nil {
						t.Fatalf("no hold, after the timeouts: err = %v, want the call made", err)
					}
					return
				}
				if !errors.Is(err, ErrBulkheadFull) {
					t.Fatalf("after the timeouts: err = %v, want ErrBulkheadFull (both slots held)", err)
				}
				if _, inFlight := b.p.limit.current(); inFlight != 2 {
					t.Errorf("slots taken = %d, want the 2 abandoned calls'", inFlight)
				}
				// The breaker is closed (2 calls in its window), but a
				// deferred retry must wait, not for the holds to end, but
				// until one call may go over them (L4): within an open
				// duration of the limit filling with them.
				wait := b.p.RetryAfter()
				if open := b.p.cfg.OpenDuration; wait <= 0 || wait > open {
					t.Errorf("RetryAfter = %v, want more than 0 and at most the open duration, %v", wait, open)
				}
				advance(wait)
				if _, err := b.do(ok); err != nil {
					t.Errorf("after RetryAfter: err = %v, want the call made over the held slots", err)
				}
				advance(time.Until(start.Add(hold)))
				if got := b.p.RetryAfter(); got != 0 {
					t.Errorf("once the hold is over: RetryAfter = %v, want 0", got)
				}
				if _, err := b.do(ok); err != nil {
					t.Errorf("once the hold is over: err = %v, want the call made", err)
				}
			})
		})
	}
}

// twoSlotsAHold is a policy with one attempt, a fixed limit of 2 and the 10 s hold.
func twoSlotsAHold(t *testing.T) bundle {
	return setup(t, func(c *Config) {
		c.MaxAttempts, c.AbandonedHold = 1, 10*time.Second
		c.LimitInitial, c.LimitMin, c.LimitMax = 2, 2, 2
	})
}

// A call given up on is not cancelled (send): it keeps its slot until the
// dependency answers it, at most the hold, and is cancelled when the hold ends.
func TestAnAbandonedCallKeepsItsSlotUntilItIsAnswered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := twoSlotsAHold(t)
		start := time.Now()
		var answered, cancelled time.Duration
		answersLater := func(ctx context.Context) (string, error) {
			_, err := answersIn(2 * time.Second)(ctx)
			answered = time.Since(start)
			return "ch_1", err
		}
		hangs := func(ctx context.Context) (string, error) {
			<-ctx.Done()
			cancelled = time.Since(start)
			return "", ctx.Err()
		}
		for _, fn := range []func(context.Context) (string, error){answersLater, hangs} {
			if _, err := Do(context.Background(), b.p, fn); !errors.Is(err, ErrTimeout) {
				t.Fatalf("err = %v, want ErrTimeout", err)
			}
		}
		advance(500 * time.Millisecond)
		if _, inFlight := b.p.limit.current(); inFlight != 2 {
			t.Fatalf("1.5 s in: slots taken = %d, want both abandoned calls'", inFlight)
		}
		advance(time.Until(start.Add(2*time.Second + time.Millisecond)))
		if answered != 2*time.Second {
			t.Errorf("the abandoned call was answered %v in, want 2s: it must run on past its timeout", answered)
		}
		if _, inFlight := b.p.limit.current(); inFlight != 1 {
			t.Errorf("once it was answered: slots taken = %d, want 1 (the call that hangs)", inFlight)
		}
		advance(time.Until(start.Add(11 * time.Second)))
		if want := 500*time.Millisecond + 10*time.Second; cancelled != want {
			t.Errorf("the hung call was cancelled %v in, want %v: when its hold ended", cancelled, want)
		}
		if _, inFlight := b.p.limit.current(); inFlight != 0 {
			t.Errorf("after the hold: slots taken = %d, want 0", inFlight)
		}
	})
}

// A caller whose own deadline ends with its attempt's gave up itself: no
// timeout, no breaker failure, as withTimeout judges it.
func TestACallerWhoseDeadlineEndsWithTheAttemptGaveUpItself(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) {
			c.MaxAttempts, c.AbandonedHold = 1, 10*time.Second
			c.MinCalls, c.WindowSize = 100, 100 // slow at 400 ms, these calls must not open it
		})
		for i := range 20 { // the two deadlines are reached together: every time, not by chance
			ctx, cancel := context.WithTimeout(context.Background(), DefaultConfig().AttemptTimeout)
			_, err := Do(ctx, b.p, answersIn(600*time.Millisecond))
			cancel()
			if errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call %d: err = %v, want the caller's own deadline, not ErrTimeout", i, err)
			}
			advance(100 * time.Millisecond) // answered: its slot is free again
		}
		if got := b.calls(t, outcomeFailure); got != 0 {
			t.Errorf("breaker failures = %d, want 0: the callers gave up", got)
		}
	})
}

// A call given up on that panics once its caller has left is logged, not
// re-raised on a goroutine nobody recovers: that would end the process.
func TestAPanicAfterTheCallerLeftIsLogged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := twoSlotsAHold(t)
		_, err := Do(context.Background(), b.p, func(ctx context.Context) (string, error) {
			<-time.After(time.Second) // on the bubble's clock
			panic("boom")
		})
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want ErrTimeout", err)
		}
		advance(time.Second)
		if got := b.trans.logged("a call given up on panicked"); got != 1 {
			t.Errorf("logged the panic %d times, want once", got)
		}
		if _, inFlight := b.p.limit.current(); inFlight != 0 {
			t.Errorf("slots taken = %d, want 0: the call is over", inFlight)
		}
	})
}

func TestRefusalsWhileEverySlotIsHeldOpenTheBreaker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := twoSlotsAHold(t)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { _, _ = b.do(hang) })
		}
		wg.Wait()
		// Two calls in the breaker's window: too few to judge. Every slot
		// is now kept for a call the dependency never answered, so each
		// refusal is the dependency's doing.
		for i := 0; b.p.State() != StateOpen; i++ {
			if i == 8 {
				t.Fatalf("breaker still %v after %d refusals", b.p.State(), i)
			}
			if _, err := b.do(ok); !errors.Is(err, ErrBulkheadFull) {
				t.Fatalf("err = %v, want ErrBulkheadFull", err)
			}
		}
	})
}

// twoHeldSlots is a process whose two calls hung: its breaker is closed
// (two calls are too few to judge) and the slots held for them fill its
// limit of 2. Call it inside the synctest bubble.
func twoHeldSlots(t *testing.T) bundle {
	t.Helper()
	b := setup(t, func(c *Config) {
		c.MaxAttempts = 1
		c.AbandonedHold = DefaultConfig().AbandonedHold
		c.LimitInitial = 2
		c.BulkheadWait = 0
	})
	hangN(t, b, 2)
	if got := b.p.State(); got != StateClosed {
		t.Fatalf("state = %v, want closed (two calls are too few to judge)", got)
	}
	if _, err := b.do(ok); !errors.Is(err, ErrBulkheadFull) {
		t.Fatalf("err = %v, want ErrBulkheadFull: the held slots fill the limit", err)
	}
	return b
}

// A process whose few calls hung keeps its breaker closed (too few calls
// to judge) while the held slots fill its limit — a worker after one hung
// charge, say. It does not wait out the 10 s hold: once the limit has been
// full of held slots for the open duration, one call goes over it, and a
// fast answer lifts the limit.
func TestAClosedBreakerSendsOneCallOverHeldSlotsPerOpenDuration(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := twoHeldSlots(t)
		if got := b.p.RetryAfter(); got <= 0 || got > time.Second {
			t.Errorf("RetryAfter = %v, want at most the 1 s open duration, not the 10 s hold", got)
		}
		advance(b.p.RetryAfter())
		if _, err := b.do(ok); err != nil {
			t.Fatalf("a second later: err = %v, want one call over the limit", err)
		}
		for i := range 3 {
			if _, err := b.do(ok); err != nil {
				t.Errorf("call %d after the fast answer: %v, want the limit lifted", i, err)
			}
		}
	})
}

// A provider that has just answered in time is busy, not failing: when a
// slow call then shrinks the limit back under the held slots, the
// refusals that follow do not reopen the breaker.
func TestRefusalsRightAfterAHealthyAnswerDoNotReopen(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, _ := hungAndOpen(t)
		advance(time.Second + time.Nanosecond)
		for i := range 3 {
			if _, err := b.do(ok); err != nil {
				t.Fatalf("probe %d: %v", i, err)
			}
		}
		// Each slow call halves the slots above the eight held ones, until
		// the held slots fill the limit.
		for i := 0; ; i++ {
			if limit, _ := b.p.limit.current(); limit <= 8 {
				break
			} else if i == 3 {
				t.Fatalf("limit %d after three slow calls, want the 8 held slots to fill it", limit)
			}
			if _, err := b.do(slowOK); err != nil {
				t.Fatalf("slow call: %v", err)
			}
		}
		for range 10 {
			if _, err := b.do(ok); !errors.Is(err, ErrBulkheadFull) {
				t.Fatalf("err = %v, want ErrBulkheadFull", err)
			}
		}
		if got := b.p.State(); got != StateClosed {
			t.Errorf("state = %v after refusals right after healthy answers, want closed", got)
		}
		// A second on, one call goes over the limit, and its answer lifts it.
		advance(time.Second)
		if _, err := b.do(ok); err != nil {
			t.Errorf("a second later: %v, want a call over the held slots", err)
		}
	})
}

// While a call over the held slots is out, a deferred retry is told to come
// back when that call's answer is due, not when the held slots free: a fast
// answer lifts the limit at once, and a caller who waited for the holds
// would miss a dependency that recovered nine seconds before them.
func TestRetryAfterAwaitsTheProbeNotTheHolds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, _ := hungAndOpen(t)
		advance(time.Second + time.Nanosecond)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = b.do(hang)
		}()
		synctest.Wait()
		if _, inFlight := b.p.limit.current(); inFlight != 9 {
			t.Fatalf("%d slots taken, want the 8 held and the probe's over them", inFlight)
		}
		advance(100 * time.Millisecond)
		if got, want := b.p.RetryAfter(), 400*time.Millisecond; got != want {
			t.Errorf("RetryAfter with the probe out = %v, want %v, when its 500 ms attempt ends", got, want)
		}
		<-done
		if got := b.p.RetryAfter(); got <= 0 || got > time.Second {
			t.Errorf("RetryAfter after a hung probe = %v, want the next open time, within 1 s", got)
		}
	})
}
