package resilience

import (
	"context"
	"errors"
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
		case !refused(err):
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
			if err := <-queued; err != nil && !refused(err) {
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
		b.p.probe = func(ctx context.Context) error {
			time.Sleep(300 * time.Millisecond)
			return nil
		}
		advance(time.Until(opened.Add(time.Second)) + time.Nanosecond) // half-open
		slowBefore := b.calls(t, "slow")
		_, err := Do(context.Background(), b.p, func(context.Context) (string, error) {
			time.Sleep(300 * time.Millisecond)
			return "ch_1", nil
		})
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
		var hung bool
		for _, ev := range b.p.TakeEvents() {
			hung = hung || (ev.Kind == EventProbeFailed && ev.Hung)
		}
		if !hung {
			t.Error("no hung probe verdict for the fleet")
		}
	})
}
