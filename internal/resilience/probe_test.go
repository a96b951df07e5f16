package resilience

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// asked is a dependency whose calls and probes are counted: a call
// answers as its step says, the probe as probeStep says.
type asked struct {
	calls, probes atomic.Int32
	probeStep     atomic.Int32 // a step
}

func (a *asked) call(s step) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		a.calls.Add(1)
		return s.call(ctx)
	}
}

func (a *asked) probe(ctx context.Context) error {
	a.probes.Add(1)
	_, err := step(a.probeStep.Load()).call(ctx)
	return err
}

// halfOpenWithProbe is hungAndOpen with a counted probe (Options.Probe)
// that answers as probeStep says, hang at first, returned once the breaker
// has turned half-open.
func halfOpenWithProbe(t *testing.T) (bundle, *asked) {
	t.Helper()
	b, opened := hungAndOpen(t)
	a := &asked{}
	a.probeStep.Store(int32(hang))
	b.p.probe = a.probe
	advance(time.Until(opened.Add(time.Second)) + time.Nanosecond) // gobreaker's expiry is exclusive
	return b, a
}

// A call that is to go over a limit full of held slots asks the probe
// first: into a dependency that still hangs only the question goes, and
// the call — a payment, say — is never made; once the probe answers in
// time, the call follows at once. A limit with room sends calls as they
// are, without a probe.
func TestAProbeGoesBeforeACallOverTheHeldSlots(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, a := halfOpenWithProbe(t)
		_, err := Do(context.Background(), b.p, a.call(ok))
		switch {
		case !errors.Is(err, ErrProbeFailed):
			t.Fatalf("call while the probe hangs: err = %v, want ErrProbeFailed", err)
		case errors.Is(err, ErrTimeout):
			t.Errorf("err = %v: a call never made must not read as timed out", err)
		case !Refused(err):
			t.Errorf("err = %v: want it counted as a refusal (nothing was sent)", err)
		case rejectionReason(err) != "probe_failed":
			t.Errorf("traced as rejected for %q, want probe_failed", rejectionReason(err))
		}
		if got := a.calls.Load(); got != 0 {
			t.Errorf("calls made into the hang = %d, want 0: only the probe goes", got)
		}
		if got := a.probes.Load(); got != 1 {
			t.Errorf("probes = %d, want 1", got)
		}
		if got := b.p.State(); got != StateOpen {
			t.Errorf("after a hung probe: state = %v, want open", got)
		}
		if _, inFlight := b.p.limit.current(); inFlight != 9 {
			t.Errorf("slots taken = %d, want 9: the hung probe's slot is held like any call's", inFlight)
		}

		a.probeStep.Store(int32(ok))
		advance(b.p.RetryAfter() + time.Nanosecond)
		if _, err := Do(context.Background(), b.p, a.call(ok)); err != nil {
			t.Fatalf("call after a timely probe: %v", err)
		}
		if got, want := [2]int32{a.probes.Load(), a.calls.Load()}, [2]int32{2, 1}; got != want {
			t.Errorf("probes, calls = %v, want %v: the call follows its probe's answer", got, want)
		}
		// The answer made room beside the held slots: the next calls go
		// as they are, until the breaker closes.
		for i := range 2 {
			if _, err := Do(context.Background(), b.p, a.call(ok)); err != nil {
				t.Fatalf("call %d after recovery: %v", i, err)
			}
		}
		if got := b.p.State(); got != StateClosed {
			t.Errorf("state = %v after three timely calls, want closed", got)
		}
		if got := a.probes.Load(); got != 2 {
			t.Errorf("probes = %d, want still 2: a limit with room sends no probe", got)
		}
	})
}

// The probe's slot passes to its call: callers that queued for a slot
// while the probe was out do not take it first, which would leave the
// caller that probed refused after proving the dependency answers.
func TestAProbesSlotPassesToItsCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, opened := hungAndOpen(t)
		answer := make(chan error)
		b.p.probe = func(ctx context.Context) error {
			select {
			case err := <-answer:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		advance(time.Until(opened.Add(time.Second)) + time.Nanosecond) // half-open
		var made atomic.Bool
		probing := make(chan error, 1)
		go func() {
			_, err := Do(context.Background(), b.p, func(context.Context) (string, error) {
				made.Store(true)
				return "ch_1", nil
			})
			probing <- err
		}()
		synctest.Wait()
		queued := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := b.do(ok)
				queued <- err
			}()
		}
		synctest.Wait()
		answer <- nil
		if err := <-probing; err != nil || !made.Load() {
			t.Errorf("caller that probed: err = %v, call made %v; want its call made", err, made.Load())
		}
		for range 3 {
			if err := <-queued; err != nil && !Refused(err) {
				t.Errorf("queued caller: err = %v", err)
			}
		}
	})
}

// The call that follows its probe has an attempt timeout and a slow
// threshold of its own: a provider answering each in 300 ms is healthy,
// although the probe and the call together take 600 ms.
func TestTheCallAfterItsProbeHasItsOwnClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, opened := hungAndOpen(t)
		b.p.probe = probeAnswersIn(300 * time.Millisecond)
		advance(time.Until(opened.Add(time.Second)) + time.Nanosecond) // half-open
		slowBefore := b.calls(t, "slow")
		_, err := Do(context.Background(), b.p, answersIn(300*time.Millisecond))
		if err != nil {
			t.Fatalf("call after a 300 ms probe: %v", err)
		}
		if got := b.calls(t, "slow") - slowBefore; got != 0 {
			t.Errorf("slow calls = %d, want 0: the call's clock starts when it is sent", got)
		}
		if got := b.p.State(); got != StateHalfOpen {
			t.Errorf("state = %v, want half-open with one of three probes answered", got)
		}
	})
}

// A fleet's probe into a dependency that still hangs is the probe too:
// the verdict is hung, and the call is not made.
func TestAFleetProbeIsAProbeToo(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, a := halfOpenWithProbe(t)
		b.p.TakeEvents()
		b.p.Impose(Imposed{Source: SourceFleet, HoldFor: 5 * time.Second, Probes: 1})
		if _, err := Do(context.Background(), b.p, a.call(ok)); !errors.Is(err, ErrProbeFailed) {
			t.Fatalf("fleet probe into the hang: err = %v, want ErrProbeFailed", err)
		}
		if got := a.calls.Load(); got != 0 {
			t.Errorf("calls = %d, want 0", got)
		}
		var failed bool
		for _, ev := range b.p.TakeEvents() {
			failed = failed || ev.Kind == EventProbeFailed
		}
		if !failed {
			t.Error("no failed probe verdict for the fleet")
		}
	})
}

// A probe the limit heard as late, but that answered before the breaker's
// slow threshold, is an answer in time: the call follows and is the
// verdict. A background limit (the worker's) is late at 1.2 × the 99th percentile
// even while slots are held, so its probe can be late and still healthy.
func TestALateProbeIsAnAnswerTheCallIsTheVerdict(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) {
			c.MaxAttempts = 1
			c.AbandonedHold = DefaultConfig().AbandonedHold
			c.LimitInitial = 8
			c.Background = true
		})
		for range 20 { // a 99th percentile of 100 ms: late at 200 ms, slow at 400 ms
			if _, err := Do(context.Background(), b.p, answersIn(100*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
		// Eight calls hang, one every 50 ms; those the shrinking limit
		// still lets in time out and keep their slots.
		var wg sync.WaitGroup
		for i := range 8 {
			if i > 0 {
				advance(50 * time.Millisecond)
			}
			wg.Go(func() { b.do(hang) })
		}
		wg.Wait()
		for i := 0; b.p.State() != StateOpen; i++ {
			if i == 10 {
				t.Fatalf("breaker still %v after %d refusals", b.p.State(), i)
			}
			b.do(ok)
		}
		advance(b.p.RetryAfter() + time.Nanosecond)
		b.p.TakeEvents()
		b.p.Impose(Imposed{Source: SourceFleet, HoldFor: 5 * time.Second, Probes: 1})
		b.p.probe = probeAnswersIn(300 * time.Millisecond)
		var made atomic.Bool
		_, err := Do(context.Background(), b.p, func(context.Context) (string, error) {
			made.Store(true)
			return "ch_1", nil
		})
		if err != nil || !made.Load() {
			t.Fatalf("after a probe answered late but before the slow threshold: err = %v, call made %v; want it made", err, made.Load())
		}
		var verdicts []EventKind
		for _, ev := range b.p.TakeEvents() {
			verdicts = append(verdicts, ev.Kind)
		}
		if len(verdicts) != 1 || verdicts[0] != EventProbeSucceeded {
			t.Errorf("fleet verdicts = %v, want one probe_succeeded, the call's", verdicts)
		}
	})
}

// While the call over a full limit is out, a caller is told to come back
// when its answer is due: the probe's attempt timeout and the call's.
func TestRetryAfterAwaitsTheProbeAndItsCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, _ := halfOpenWithProbe(t)
		b.p.probe = probeAnswersIn(300 * time.Millisecond)
		done := make(chan error, 1)
		go func() {
			_, err := Do(context.Background(), b.p, answersIn(350*time.Millisecond))
			done <- err
		}()
		advance(550 * time.Millisecond) // the probe answered at 300 ms; the call is out until 650 ms
		if got, want := b.p.RetryAfter(), 450*time.Millisecond; got != want {
			t.Errorf("RetryAfter = %v, want %v: until two attempt timeouts after the probe went", got, want)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// The call's clock restarts wherever its probe's timer has got to — not
// yet late, late for the limit, slow for the breaker — and the call is
// still reported once; only a probe the breaker has heard as slow cannot
// hand its clock on.
func TestRestartingTheClockLeavesNothingCounted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		after     time.Duration // with a 99th percentile of 200 ms: late at 240, slow at 400
		restarted bool
	}{
		{"running", 100 * time.Millisecond, true},
		{"late", 300 * time.Millisecond, true},
		{"slow", 450 * time.Millisecond, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, func(c *Config) { c.MinCalls, c.WindowSize = 100, 100 }) // never trips
				br := b.p.breaker
				succeed(br.limit, 200*time.Millisecond, minTailSamples)
				c, err := br.allow()
				if err != nil {
					t.Fatal(err)
				}
				c.startClock()
				advance(tt.after)
				if got := c.restartClock(); got != tt.restarted {
					t.Fatalf("restartClock = %v, want %v", got, tt.restarted)
				}
				// Past the new clock's late step, short of its
				// slow threshold: a healthy call, unless the probe's slow
				// verdict came first.
				advance(300 * time.Millisecond)
				c.finish(nil, br.calls.success)
				want := [2]int{1, 0}
				if !tt.restarted {
					want = [2]int{0, 1}
				}
				if got := [2]int{b.calls(t, "success"), b.calls(t, "slow")}; got != want {
					t.Errorf("reported successful, slow = %v, want %v", got, want)
				}
			})
		})
	}
}

// A final answer to the probe (a 4xx, say: the dependency rejects the
// question) is still an answer in time, and the call follows; a probe the
// caller gave up on leaves the caller's own error reachable.
func TestAFinalAnswerToTheProbeIsAnAnswer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, a := halfOpenWithProbe(t)
		a.probeStep.Store(int32(decline))
		if _, err := Do(context.Background(), b.p, a.call(ok)); err != nil || a.calls.Load() != 1 {
			t.Fatalf("after a final answer to the probe: err = %v, calls made %d; want the call made", err, a.calls.Load())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		b, a := halfOpenWithProbe(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := Do(ctx, b.p, a.call(ok))
		if !errors.Is(err, ErrProbeFailed) || !errors.Is(err, context.DeadlineExceeded) || a.calls.Load() != 0 {
			t.Errorf("caller gone during the probe: err = %v, calls made %d; want ErrProbeFailed with the deadline, no call", err, a.calls.Load())
		}
	})
}
