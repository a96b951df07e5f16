package resilience

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Every test here runs inside synctest.Test and moves its fake clock with
// advance: "one nanosecond before the threshold" means exactly that, and
// nothing waits on real time.

func TestSlowCallCountedWhileRunning(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// A one-call window that trips on its first failure shows the
		// moment the breaker learns about the slow call.
		b := setup(t, func(c *Config) { c.WindowSize, c.MinCalls, c.MaxAttempts = 1, 1, 1 })
		release := make(chan struct{})
		var got string
		var err error
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			got, err = Do(context.Background(), b.p, func(context.Context) (string, error) {
				<-release // hung: ignores its context until released
				return "ch_late", nil
			})
		}()

		advance(400*time.Millisecond - time.Nanosecond)
		if got, want := b.p.State(), StateClosed; got != want {
			t.Fatalf("just before the threshold: state = %v, want %v", got, want)
		}
		advance(time.Nanosecond)
		if got, want := b.p.State(), StateOpen; got != want {
			t.Fatalf("at the threshold, call still running: state = %v, want %v", got, want)
		}
		if got, want := b.calls(t, outcomeSlow), 1; got != want {
			t.Errorf("slow calls = %d, want %d", got, want)
		}

		close(release)
		<-finished
		if err != nil || got != "ch_late" {
			t.Errorf("late result = %q, %v; want %q, nil: the caller still gets it", got, err, "ch_late")
		}
		if got, want := b.calls(t, outcomeSuccess), 0; got != want {
			t.Errorf("successes = %d, want %d: the call was reported once, as slow", got, want)
		}
	})
}

func TestOpensWithinASecondOfProviderTurningSlow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// The article's scenario with every default: 20 req/s, each
		// request with a 3 s deadline; the provider answers in 200 ms,
		// then from turnSlow on takes 10 s.
		b := setup(t, nil)
		start := time.Now()
		const turnSlow = time.Second
		provider := func(ctx context.Context) (string, error) {
			d := 200 * time.Millisecond
			if time.Since(start) >= turnSlow {
				d = 10 * time.Second
			}
			select {
			case <-time.After(d):
				return "ch_1", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		var wg sync.WaitGroup
		for range 60 { // 3 s of traffic
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				_, _ = Do(ctx, b.p, provider)
			})
			advance(50 * time.Millisecond)
		}
		wg.Wait()

		trans := b.trans.all()
		if len(trans) == 0 {
			t.Fatal("the breaker never opened")
		}
		first := trans[0]
		if first.to != "open" {
			t.Fatalf("first transition to %q, want open", first.to)
		}
		if got, limit := first.at.Sub(start)-turnSlow, time.Second; got < 0 || got > limit {
			t.Errorf("opened %v after the provider turned slow, want within %v", got, limit)
		}
		t.Logf("opened %v after the provider turned slow; window then: %+v", first.at.Sub(start)-turnSlow, first)
		if first.slowCalls == 0 {
			t.Errorf("window at opening = %+v, want slow calls in it", first)
		}
	})
}

func TestBreakerTrips(t *testing.T) {
	t.Parallel()
	repeat := func(s step, n int) []step {
		steps := make([]step, n)
		for i := range steps {
			steps[i] = s
		}
		return steps
	}
	tests := []struct {
		name  string
		steps []step
		want  State
	}{
		{"9 failures of 9 stay below min calls", repeat(fail, 9), StateClosed},
		{"4 failures of 10 stay below the rate", append(repeat(ok, 6), repeat(fail, 4)...), StateClosed},
		{"5 failures of 10 reach the rate", append(repeat(ok, 5), repeat(fail, 5)...), StateOpen},
		{"slow successes alone", repeat(slowOK, 10), StateOpen},
		{"5 slow successes of 10", append(repeat(ok, 5), repeat(slowOK, 5)...), StateOpen},
		{"declines never trip", repeat(decline, 30), StateClosed},
		{"declines are not calls for min calls", append(repeat(fail, 9), repeat(decline, 5)...), StateClosed},
		{
			"old failures roll out of the window",
			// The 4 failures roll out under 10 successes, so the 4
			// fresh ones make 4 of 10, not 8 of 24 or 8 of 10.
			append(append(append(repeat(ok, 6), repeat(fail, 4)...), repeat(ok, 10)...), repeat(fail, 4)...),
			StateClosed,
		},
		{
			"fresh failures after rolling out still trip",
			append(append(append(repeat(ok, 6), repeat(fail, 4)...), repeat(ok, 10)...), repeat(fail, 5)...),
			StateOpen,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
				for i, s := range tt.steps {
					if got := b.p.State(); got != StateClosed {
						t.Fatalf("opened early, before step %d", i)
					}
					_, _ = b.do(s)
				}
				if got := b.p.State(); got != tt.want {
					t.Errorf("state = %v, want %v", got, tt.want)
				}
			})
		})
	}
}

// openBreaker trips b's breaker with failures and returns when it opened.
func openBreaker(t *testing.T, b bundle) time.Time {
	t.Helper()
	for range 10 {
		_, _ = b.do(fail)
	}
	if got := b.p.State(); got != StateOpen {
		t.Fatalf("state = %v, want open", got)
	}
	return time.Now()
}

func TestOpenBecomesHalfOpenAfterOpenDuration(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// setup's Rand picks the longest jitter: 1 s + 200 ms - 1 ns.
		b := setup(t, func(c *Config) { c.MaxAttempts, c.OpenJitter = 1, 200*time.Millisecond })
		openFor := time.Second + 200*time.Millisecond - time.Nanosecond
		openBreaker(t, b)

		if got, want := b.p.RetryAfter(), openFor; got != want {
			t.Errorf("RetryAfter at opening = %v, want %v", got, want)
		}
		if _, err := b.do(ok); !errors.Is(err, ErrOpen) {
			t.Errorf("call while open: err = %v, want ErrOpen", err)
		}
		advance(openFor - time.Millisecond)
		if got, want := b.p.RetryAfter(), time.Millisecond; got != want {
			t.Errorf("RetryAfter = %v, want %v", got, want)
		}
		if got, want := b.p.State(), StateOpen; got != want {
			t.Errorf("1 ms before the end: state = %v, want %v", got, want)
		}
		advance(time.Millisecond + time.Nanosecond)
		if got, want := b.p.State(), StateHalfOpen; got != want {
			t.Errorf("after the open duration: state = %v, want %v", got, want)
		}
		if got := b.p.RetryAfter(); got != 0 {
			t.Errorf("RetryAfter when half-open = %v, want 0", got)
		}
	})
}

func TestHalfOpen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		probes []step
		want   State
	}{
		{"closes after 3 good probes", []step{ok, ok, ok}, StateClosed},
		{"stays half-open after 2 good probes", []step{ok, ok}, StateHalfOpen},
		{"re-opens on a failed probe", []step{ok, fail}, StateOpen},
		{"re-opens on a slow probe", []step{ok, slowOK}, StateOpen},
		{"a decline is not a verdict", []step{decline, ok, ok, ok}, StateClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
				openBreaker(t, b)
				advance(time.Second + time.Nanosecond)
				for _, s := range tt.probes {
					_, _ = b.do(s)
				}
				if got := b.p.State(); got != tt.want {
					t.Errorf("state = %v, want %v", got, tt.want)
				}
			})
		})
	}
}

func TestHalfOpenRejectsExcessCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
		openBreaker(t, b)
		advance(time.Second + time.Nanosecond)

		release := make(chan struct{})
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_, _ = Do(context.Background(), b.p, func(context.Context) (string, error) {
					<-release
					return "ch_1", nil
				})
			})
		}
		synctest.Wait() // the 3 probes are in flight
		if _, err := b.do(ok); !errors.Is(err, ErrTooManyRequests) {
			t.Errorf("4th call: err = %v, want ErrTooManyRequests", err)
		}
		close(release)
		wg.Wait()
		if got, want := b.p.State(), StateClosed; got != want {
			t.Errorf("after the probes: state = %v, want %v", got, want)
		}
	})
}

func TestTransitionsResetWindowAndAreReported(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
		for range 5 {
			_, _ = b.do(ok)
		}
		openBreaker(t, b)
		advance(time.Second + time.Nanosecond)
		for range 3 {
			_, _ = b.do(ok)
		}
		// Were the window not reset on closing, these 5 failures would
		// join the 10 earlier ones and trip it again.
		for range 5 {
			_, _ = b.do(fail)
		}
		if got, want := b.p.State(), StateClosed; got != want {
			t.Errorf("state = %v, want %v", got, want)
		}

		got := b.trans.all()
		want := []transition{
			{from: "closed", to: "open", calls: 10, failures: 5},
			{from: "open", to: "half-open"},
			{from: "half-open", to: "closed", calls: 3},
		}
		if len(got) != len(want) {
			t.Fatalf("transitions = %+v, want %+v", got, want)
		}
		for i := range want {
			got[i].at = time.Time{}
			if got[i] != want[i] {
				t.Errorf("transition %d = %+v, want %+v", i, got[i], want[i])
			}
		}
		for _, tr := range want {
			c := b.m.breakerTransitions.WithLabelValues("payment", tr.from, tr.to)
			if got := counterValue(t, c); got != 1 {
				t.Errorf("transitions_total{%s→%s} = %v, want 1", tr.from, tr.to, got)
			}
		}
		if got := counterValue(t, b.m.breakerState.WithLabelValues("payment")); got != float64(StateClosed) {
			t.Errorf("breaker_state = %v, want %v", got, float64(StateClosed))
		}
	})
}

func TestPanickingCallReleasesItsProbe(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts, c.HalfOpenProbes = 1, 1 })
		openBreaker(t, b)
		advance(time.Second + time.Nanosecond)
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not propagate")
				}
			}()
			_, _ = Do(context.Background(), b.p, func(context.Context) (string, error) { panic("boom") })
		}()
		if got, want := b.p.State(), StateOpen; got != want {
			t.Errorf("after a panicking probe: state = %v, want %v", got, want)
		}
		if _, got := b.p.limit.current(); got != 0 {
			t.Errorf("limit slots held = %d, want 0", got)
		}
	})
}
