package resilience

import (
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
		c.Limit, c.BulkheadSize = LimitStatic, 10
	})
}

// hangTen sends ten calls that hang, one every 50 ms from now, and returns
// once every one has timed out (500 ms each), the last sent 450 ms in.
func hangTen(t *testing.T, b bundle) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range 10 {
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

func TestHungCallsHoldTheBreakerOpenUntilTheyMayBeDone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := holdSetup(t)
		start := time.Now()
		hangTen(t, b) // trips at 850 ms, when the tenth passes 400 ms; returns at 950 ms
		if got := b.p.State(); got != StateOpen {
			t.Fatalf("state = %v, want open", got)
		}
		// The last hung call was sent at 450 ms: the provider may hold it
		// until 10.45 s, and no probe goes in before.
		heldUntil := start.Add(450*time.Millisecond + 10*time.Second)
		if got, want := b.p.RetryAfter(), time.Until(heldUntil); got != want {
			t.Errorf("RetryAfter = %v, want %v (until the last abandoned call's send + 10 s)", got, want)
		}
		events := transitionEvents(b.p.TakeEvents())
		if len(events) == 0 || events[0].Kind != EventOpened {
			t.Fatalf("events = %+v, want the opening first", events)
		}
		last := events[len(events)-1]
		if end := last.At.Add(last.OpenFor); last.Kind != EventOpened || !end.Equal(heldUntil) {
			t.Errorf("last event %+v ends at %v, want an opening that ends at %v: the coordinator must hear the hold", last, end.Sub(start), heldUntil.Sub(start))
		}

		// Past gobreaker's own 1 s Timeout, which turns it half-open
		// when asked, the breaker is still open.
		advance(2 * time.Second)
		if got := b.p.State(); got != StateOpen {
			t.Errorf("2 s later: state = %v, want open", got)
		}
		if got, want := b.p.RetryAfter(), time.Until(heldUntil); got != want {
			t.Errorf("2 s later: RetryAfter = %v, want %v", got, want)
		}
		advance(time.Until(heldUntil) - time.Nanosecond)
		if _, err := b.do(ok); !errors.Is(err, ErrOpen) {
			t.Errorf("1 ns before the hold ends: err = %v, want ErrOpen", err)
		}
		advance(2 * time.Nanosecond)
		for i := range 3 {
			if _, err := b.do(ok); err != nil {
				t.Fatalf("probe %d after the hold: %v", i, err)
			}
		}
		if got := b.p.State(); got != StateClosed {
			t.Errorf("after three good probes: state = %v, want closed", got)
		}
	})
}

func TestHoldOffOpensForTheOpenDuration(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts, c.Limit, c.BulkheadSize = 1, LimitStatic, 10 })
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

func TestAbandonedCallHoldsALaterOpening(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := holdSetup(t)
		start := time.Now()
		if _, err := b.do(hang); !errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want ErrTimeout", err)
		}
		advance(2 * time.Second)
		openBreaker(t, b) // fast failures, 2.5 s after the hung call was sent
		if got, want := b.p.RetryAfter(), time.Until(start.Add(10*time.Second)); got != want {
			t.Errorf("RetryAfter = %v, want %v: the earlier abandoned call may still be held", got, want)
		}
	})
}

func TestAbandonedCallUnderAFleetStateIsReportedOnly(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := holdSetup(t)
		// The fleet is half-open and this process holds the probe lease.
		b.p.Impose(Imposed{Source: SourceFleet, HoldFor: 5 * time.Second, Probes: 3})
		start := time.Now()
		if _, err := b.do(hang); !errors.Is(err, ErrTimeout) {
			t.Fatalf("probe err = %v, want ErrTimeout", err)
		}
		var opened []Event
		for _, ev := range b.p.TakeEvents() {
			if ev.Kind == EventOpened {
				opened = append(opened, ev)
			}
		}
		if len(opened) != 1 || !opened[0].At.Add(opened[0].OpenFor).Equal(start.Add(10*time.Second)) {
			t.Fatalf("opened events = %+v, want one ending 10 s after the probe was sent", opened)
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
					c.Limit, c.BulkheadSize = LimitStatic, 2
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
				// deferred retry must still wait for a slot to free.
				if got, want := b.p.RetryAfter(), time.Until(start.Add(hold)); got != want {
					t.Errorf("RetryAfter = %v, want %v (until the first held slot frees)", got, want)
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

func TestRefusalsWhileEverySlotIsHeldOpenTheBreaker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) {
			c.MaxAttempts, c.AbandonedHold = 1, 10*time.Second
			c.Limit, c.BulkheadSize = LimitStatic, 2
		})
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
