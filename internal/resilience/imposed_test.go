package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// counting wraps a step and counts the calls that reach the dependency.
func counting(n *atomic.Int64, s step) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		n.Add(1)
		return s.call(ctx)
	}
}

func TestImposedOpenLaterThanLocalWins(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
		openBreaker(t, b) // open for 1 s locally
		b.p.Impose(Imposed{Source: SourceFleet, OpenFor: 3 * time.Second, HoldFor: 3 * time.Second})

		advance(1500 * time.Millisecond) // the local open state is over
		var calls atomic.Int64
		if _, err := Do(context.Background(), b.p, counting(&calls, ok)); !errors.Is(err, ErrOpen) {
			t.Errorf("1.5 s after opening: err = %v, want ErrOpen (the fleet's later deadline)", err)
		}
		if got, want := b.p.RetryAfter(), 1500*time.Millisecond; got != want {
			t.Errorf("RetryAfter = %v, want %v", got, want)
		}
		if got, want := b.p.Source(), SourceFleet; got != want {
			t.Errorf("Source = %v, want %v", got, want)
		}
		advance(1500 * time.Millisecond) // the imposed deadline passes
		if got, want := b.p.Source(), SourceLocal; got != want {
			t.Errorf("after the deadline: Source = %v, want %v", got, want)
		}
		// The local breaker resumes where it was: open past its timeout,
		// so half-open on the next call, which goes through as its probe.
		if _, err := Do(context.Background(), b.p, counting(&calls, ok)); err != nil {
			t.Errorf("after the deadline: err = %v, want the local probe to go through", err)
		}
		if got, want := b.p.State(), StateHalfOpen; got != want {
			t.Errorf("state = %v, want %v", got, want)
		}
		if got := calls.Load(); got != 1 {
			t.Errorf("calls reaching the dependency = %d, want 1", got)
		}
	})
}

func TestImposedDeadlinePassesLocalResumes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
		// Another process's breaker opened; ours is closed. The coordinator
		// is then lost (no release ever comes).
		b.p.Impose(Imposed{Source: SourceFleet, OpenFor: time.Second, HoldFor: 2 * time.Second})
		var calls atomic.Int64
		if _, err := Do(context.Background(), b.p, counting(&calls, ok)); !errors.Is(err, ErrOpen) {
			t.Errorf("while imposed open: err = %v, want ErrOpen", err)
		}
		advance(time.Second)
		if _, err := Do(context.Background(), b.p, counting(&calls, ok)); !errors.Is(err, ErrTooManyRequests) {
			t.Errorf("while another process probes: err = %v, want ErrTooManyRequests", err)
		}
		if got, want := b.p.RetryAfter(), 500*time.Millisecond; got != want {
			t.Errorf("RetryAfter while another process probes = %v, want %v (when its probe's answer is due, not the 1 s hold)", got, want)
		}
		advance(time.Second)
		if _, err := Do(context.Background(), b.p, counting(&calls, ok)); err != nil {
			t.Errorf("after the hold: err = %v, want the local (closed) breaker to let it through", err)
		}
		if got := calls.Load(); got != 1 {
			t.Errorf("calls reaching the dependency = %d, want 1", got)
		}
		if got := b.calls(t, outcomeRejected); got != 2 {
			t.Errorf("rejected calls = %d, want 2", got)
		}
	})
}

func TestForcedWinsUntilCleared(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
		// A fleet probe is out, then the operator forces the dependency open.
		b.p.Impose(Imposed{Source: SourceFleet, HoldFor: time.Second, Probes: 3})
		b.p.Impose(Imposed{Source: SourceForced, OpenFor: time.Hour, HoldFor: time.Hour})
		var calls atomic.Int64
		for range 20 {
			if _, err := Do(context.Background(), b.p, counting(&calls, ok)); !errors.Is(err, ErrOpen) {
				t.Fatalf("forced open: err = %v, want ErrOpen", err)
			}
		}
		advance(30 * time.Minute)
		if _, err := Do(context.Background(), b.p, counting(&calls, ok)); !errors.Is(err, ErrOpen) {
			t.Errorf("forced open, 30 min later: err = %v, want ErrOpen", err)
		}
		if got, want := b.p.Source(), SourceForced; got != want {
			t.Errorf("Source = %v, want %v", got, want)
		}
		if got := calls.Load(); got != 0 {
			t.Errorf("calls reaching the dependency while forced open = %d, want 0", got)
		}
		if got := counterValue(t, b.m.breakerSource.WithLabelValues("payment", "forced")); got != 1 {
			t.Errorf(`resilience_breaker_source{source="forced"} = %v, want 1`, got)
		}
		b.p.Release()
		if _, err := Do(context.Background(), b.p, counting(&calls, ok)); err != nil {
			t.Errorf("cleared: err = %v, want the call through", err)
		}
		if got := counterValue(t, b.m.breakerSource.WithLabelValues("payment", "local")); got != 1 {
			t.Errorf(`cleared: resilience_breaker_source{source="local"} = %v, want 1`, got)
		}
	})
}

func TestOnlyTheProbeHolderProbes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		probe   step
		want    EventKind
		holding bool // whether the holder still refuses after the verdict
	}{
		{"success closes", ok, EventProbeSucceeded, false},
		{"failure", fail, EventProbeFailed, true},
		{"slow probe fails while in flight", hang, EventProbeFailed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				holder := setup(t, func(c *Config) { c.MaxAttempts = 1 })
				other := setup(t, func(c *Config) { c.MaxAttempts = 1 })
				// Both were told the fleet's open state ended; holder got
				// the probe lease, other waits for its verdict.
				holder.p.Impose(Imposed{Source: SourceFleet, HoldFor: 2 * time.Second, Probes: 3})
				other.p.Impose(Imposed{Source: SourceFleet, HoldFor: 2 * time.Second})

				var otherCalls, holderCalls atomic.Int64
				for range 5 {
					if _, err := Do(context.Background(), other.p, counting(&otherCalls, ok)); !errors.Is(err, ErrTooManyRequests) {
						t.Fatalf("other: err = %v, want ErrTooManyRequests", err)
					}
				}
				release := make(chan struct{})
				var wg sync.WaitGroup
				for range 3 {
					wg.Go(func() {
						_, _ = Do(context.Background(), holder.p, func(ctx context.Context) (string, error) {
							holderCalls.Add(1)
							<-release
							return tt.probe.call(ctx)
						})
					})
				}
				synctest.Wait() // 3 probes in flight
				if _, err := Do(context.Background(), holder.p, counting(&holderCalls, ok)); !errors.Is(err, ErrTooManyRequests) {
					t.Errorf("4th call of the holder: err = %v, want ErrTooManyRequests", err)
				}
				close(release)
				wg.Wait()
				synctest.Wait()

				if got := otherCalls.Load(); got != 0 {
					t.Errorf("calls of the waiting process = %d, want 0", got)
				}
				if got := holderCalls.Load(); got != 3 {
					t.Errorf("probes of the holder = %d, want 3", got)
				}
				events := holder.p.TakeEvents()
				if len(events) != 1 || events[0].Kind != tt.want {
					t.Fatalf("holder's events = %v, want one %v", events, tt.want)
				}
				if got := len(other.p.TakeEvents()); got != 0 {
					t.Errorf("waiting process's events = %d, want none", got)
				}
				_, err := Do(context.Background(), holder.p, counting(&holderCalls, ok))
				if got := err != nil; got != tt.holding {
					t.Errorf("holder after the verdict: err = %v, want refused %v", err, tt.holding)
				}
			})
		})
	}
}

func TestExcludedProbeIsNoVerdict(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
		b.p.Impose(Imposed{Source: SourceFleet, HoldFor: time.Second, Probes: 1})
		if _, err := b.do(decline); !errors.Is(err, errDeclined) {
			t.Fatalf("err = %v, want the decline", err)
		}
		if got := b.p.TakeEvents(); len(got) != 0 {
			t.Errorf("events after a decline = %v, want none", got)
		}
		if _, err := b.do(ok); err != nil {
			t.Fatalf("second probe: err = %v, want it admitted (the decline returned its permit)", err)
		}
		if got := b.p.TakeEvents(); len(got) != 1 || got[0].Kind != EventProbeSucceeded {
			t.Errorf("events = %v, want one probe_succeeded", got)
		}
	})
}

func TestLocalOpenIsReported(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
		select {
		case <-b.p.Events():
			t.Fatal("an event before anything happened")
		default:
		}
		openBreaker(t, b)
		<-b.p.Events()
		got := b.p.TakeEvents()
		if len(got) != 1 || got[0].Kind != EventOpened || got[0].OpenFor != time.Second {
			t.Errorf("events = %+v, want one opened for 1s", got)
		}
	})
}

// Every failed probe, hung or fast, opens the breaker for the same open
// duration: a provider that answers again is noticed within one open
// state however long it was down.
func TestOpenTimeStaysTheSameAfterFailedProbes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		probe step
		want  []time.Duration
	}{
		{fail, []time.Duration{time.Second, time.Second, time.Second}},
		{hang, []time.Duration{time.Second, time.Second, time.Second, time.Second}},
	} {
		t.Run(map[step]string{fail: "fast failures", hang: "hung"}[tt.probe], func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				// setup's Rand returns n-1: the longest duration each time.
				b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
				openBreaker(t, b)
				_ = b.p.TakeEvents()
				wait := time.Second
				for i, w := range tt.want {
					advance(wait - time.Nanosecond)
					if _, err := b.do(ok); !errors.Is(err, ErrOpen) {
						t.Fatalf("round %d, 1 ns before the end: err = %v, want ErrOpen", i, err)
					}
					advance(2 * time.Nanosecond) // gobreaker's expiry is exclusive
					start := time.Now()
					if _, err := b.do(tt.probe); err == nil {
						t.Fatalf("round %d: probe made and succeeded, want it failing", i)
					}
					// A hung probe reopens at the slow threshold, before
					// its timeout returns.
					opened := start
					if tt.probe == hang {
						opened = start.Add(400 * time.Millisecond)
					}
					events := b.p.TakeEvents()
					if len(events) != 1 || events[0].OpenFor != w {
						t.Fatalf("round %d: events %+v, want opened for %v", i, events, w)
					}
					wait = w - time.Since(opened)
				}
				// A successful round closes it.
				advance(wait + time.Nanosecond)
				for range 3 {
					if _, err := b.do(ok); err != nil {
						t.Fatalf("probe: %v", err)
					}
				}
				openBreaker(t, b)
				if got := b.p.RetryAfter(); got != time.Second {
					t.Errorf("after closing and tripping again: RetryAfter = %v, want 1s", got)
				}
			})
		})
	}
}

func TestBreakDuration(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	if got := cfg.BreakDuration(func(int64) int64 { return 0 }); got != 500*time.Millisecond {
		t.Errorf("no jitter drawn: BreakDuration = %v, want 500ms", got)
	}
	if got, want := cfg.BreakDuration(func(n int64) int64 { return n - 1 }), 600*time.Millisecond-time.Nanosecond; got != want {
		t.Errorf("the most jitter: BreakDuration = %v, want %v", got, want)
	}
}

// TestEffectiveStateShowsImposedStates: resilience_breaker_state is the
// process's own breaker, closed throughout here; the effective state shows
// what calls meet — forced or fleet open, the fleet's half-open hold — and
// follows an imposed state that runs out without a release.
func TestEffectiveStateShowsImposedStates(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := New("payment", DefaultConfig(), Options{Classify: classify, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		gauge := func(name string) float64 {
			t.Helper()
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() == name {
					return mf.GetMetric()[0].GetGauge().GetValue()
				}
			}
			return -1
		}
		check := func(when string, want State) {
			t.Helper()
			if got := gauge("resilience_breaker_effective_state"); got != float64(want) {
				t.Errorf("%s: resilience_breaker_effective_state = %v, want %v (%v)", when, got, float64(want), want)
			}
			if got := gauge("resilience_breaker_state"); got != float64(StateClosed) {
				t.Errorf("%s: resilience_breaker_state = %v, want 0 (the local breaker)", when, got)
			}
		}
		check("nothing imposed", StateClosed)
		p.Impose(Imposed{Source: SourceForced, OpenFor: 10 * time.Second, HoldFor: 10 * time.Second})
		check("forced open", StateOpen)
		advance(11 * time.Second)
		check("forced slice run out", StateClosed)
		p.Impose(Imposed{Source: SourceFleet, OpenFor: time.Second, HoldFor: 2 * time.Second})
		check("fleet open", StateOpen)
		advance(1500 * time.Millisecond)
		check("fleet half-open, another process probes", StateHalfOpen)
		p.Release()
		check("released", StateClosed)
	})
}

// An imposed state starts the local window afresh, and a call admitted
// before it reports nothing when it ends, released or not: the fleet has
// heard of that outage already (as gobreaker ignores a call from before its
// own last state change). Four failures before the fleet opened, six calls
// in flight then that fail after it, and six failures after make sixteen;
// only the last six count, and the breaker stays closed. Counting stale
// calls opened the worker's breaker for the fleet again after three of the
// five hangs of the matrix's flapping row, once they had ended.
func TestAnImposedStateStartsTheLocalWindowAfresh(t *testing.T) {
	t.Parallel()
	for _, release := range []bool{true, false} {
		t.Run(fmt.Sprintf("release=%v", release), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				// A floor of 10 slots, so that the six are all in flight.
				b := setup(t, func(c *Config) { c.MaxAttempts, c.LimitInitial, c.LimitMin = 1, 10, 10 })
				for range 5 {
					_, _ = b.do(ok)
				}
				for range 4 {
					_, _ = b.do(fail)
				}
				failsLater := func(context.Context) (string, error) {
					<-time.After(300 * time.Millisecond)
					return "", errUnavailable
				}
				for range 6 {
					go func() { _, _ = Do(context.Background(), b.p, failsLater) }()
				}
				advance(100 * time.Millisecond)
				b.p.Impose(Imposed{Source: SourceFleet, OpenFor: 100 * time.Millisecond, HoldFor: 100 * time.Millisecond})
				advance(100 * time.Millisecond)
				if release {
					b.p.Release()
				}
				advance(200 * time.Millisecond) // the six fail
				for range 6 {
					_, _ = b.do(fail)
				}
				if got := b.p.State(); got != StateClosed {
					t.Errorf("state = %v after 4 failures, the fleet's state, 6 stale and 6 more failures, want closed", got)
				}
			})
		})
	}
}

// A fleet release lifts a limit full of slots held for calls abandoned in
// the hang to them plus one, as a fast answer of this process's own would:
// another process's probe has just shown the dependency has room.
func TestReleaseMakesRoomBesideTheHeldSlots(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := twoHeldSlots(t)
		b.p.Impose(Imposed{Source: SourceFleet, OpenFor: 100 * time.Millisecond, HoldFor: 100 * time.Millisecond})
		advance(100 * time.Millisecond)
		b.p.Release()
		if limit, inFlight := b.p.limit.current(); limit != inFlight+1 {
			t.Fatalf("limit %d with %d slots held, want one more", limit, inFlight)
		}
		if _, err := b.do(ok); err != nil {
			t.Errorf("after the release: err = %v, want the call made beside the held slots", err)
		}
	})
}

// TestACallThatWaitedForASlotMeetsTheStateOfNow: a call the breaker admitted
// waits for a slot of a full limit; the fleet opens meanwhile. When the slot
// frees, the call is refused, not sent into the outage the fleet found.
func TestACallThatWaitedForASlotMeetsTheStateOfNow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) {
			c.MaxAttempts, c.LimitInitial, c.LimitMin, c.LimitMax, c.BulkheadWait = 1, 1, 1, 1, time.Second
		})
		go func() { _, _ = Do(context.Background(), b.p, answersIn(200*time.Millisecond)) }()
		synctest.Wait() // the only slot is taken
		s := &script{steps: []step{ok}}
		var err error
		done := make(chan struct{})
		go func() { _, err = Do(context.Background(), b.p, s.call); close(done) }()
		advance(50 * time.Millisecond) // it waits for the slot
		b.p.Impose(Imposed{Source: SourceFleet, OpenFor: time.Second, HoldFor: 2 * time.Second})
		advance(200 * time.Millisecond) // the slot frees
		<-done
		if !errors.Is(err, ErrOpen) {
			t.Errorf("err = %v, want ErrOpen: the fleet opened while the call waited", err)
		}
		if s.attempts != 0 {
			t.Errorf("attempts = %d, want 0: nothing is sent once the fleet refuses", s.attempts)
		}
		if limit, inFlight := b.p.limit.current(); inFlight != 0 {
			t.Errorf("in flight = %d of %d after the refusal, want 0: its slot is freed", inFlight, limit)
		}
	})
}
