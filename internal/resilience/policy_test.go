package resilience

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// expect checks that s made attempts attempts, that the breaker stayed
// closed, and that exactly one call had the outcome.
func (b bundle) expect(t *testing.T, s *script, attempts int, outcome string) {
	t.Helper()
	if got, want := s.attempts, attempts; got != want {
		t.Errorf("attempts = %d, want %d", got, want)
	}
	if got, want := b.p.State(), StateClosed; got != want {
		t.Errorf("state = %v, want %v", got, want)
	}
	if got, want := b.calls(t, outcome), 1; got != want {
		t.Errorf("%s calls = %d, want %d", outcome, got, want)
	}
}

// script answers attempt i with steps[i] and counts the attempts.
type script struct {
	steps    []step
	attempts int
}

func (s *script) call(ctx context.Context) (string, error) {
	st := s.steps[min(s.attempts, len(s.steps)-1)]
	s.attempts++
	return st.call(ctx)
}

func TestRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		edit         func(*Config)
		open         bool          // trip the breaker first
		deadline     time.Duration // 0: none
		steps        []step
		wantAttempts int
		wantErrs     []error // each must be reachable with errors.Is
		wantElapsed  time.Duration
		wantRetries  int
	}{
		{
			name:         "retries a transient failure after a jittered backoff",
			steps:        []step{fail, ok},
			wantAttempts: 2,
			wantElapsed:  50*time.Millisecond - time.Nanosecond, // setup's Rand picks the longest backoff
			wantRetries:  1,
		},
		{
			name:         "retries an attempt timeout",
			steps:        []step{hang, ok},
			wantAttempts: 2,
			wantElapsed:  500*time.Millisecond + 50*time.Millisecond - time.Nanosecond,
			wantRetries:  1,
		},
		{
			name:         "gives up after MaxAttempts",
			steps:        []step{fail, fail, fail},
			wantAttempts: 2,
			wantErrs:     []error{errUnavailable},
			wantElapsed:  50*time.Millisecond - time.Nanosecond,
			wantRetries:  1,
		},
		{
			name:         "never retries a final answer",
			steps:        []step{decline, ok},
			wantAttempts: 1,
			wantErrs:     []error{errDeclined},
		},
		{
			name:         "stops when the backoff would pass the deadline",
			deadline:     40 * time.Millisecond,
			steps:        []step{fail, ok},
			wantAttempts: 1,
			wantErrs:     []error{errUnavailable},
		},
		{
			name:         "stops at the caller's deadline",
			edit:         func(c *Config) { c.AttemptTimeout = time.Second },
			deadline:     700 * time.Millisecond,
			steps:        []step{hang, ok},
			wantAttempts: 1,
			wantErrs:     []error{context.DeadlineExceeded},
			wantElapsed:  700 * time.Millisecond,
		},
		{
			name:         "a retry gets only what is left of the deadline",
			deadline:     600 * time.Millisecond,
			steps:        []step{hang, hang},
			wantAttempts: 2,
			wantErrs:     []error{context.DeadlineExceeded},
			wantElapsed:  600 * time.Millisecond,
			wantRetries:  1,
		},
		{
			name:         "never retries a breaker rejection",
			open:         true,
			steps:        []step{ok},
			wantAttempts: 0,
			wantErrs:     []error{ErrOpen},
		},
		{
			name:         "stops when the retry is rejected, keeping the failure",
			edit:         func(c *Config) { c.WindowSize, c.MinCalls = 1, 1 },
			steps:        []step{fail, ok},
			wantAttempts: 1,
			wantErrs:     []error{ErrOpen, errUnavailable},
			wantElapsed:  50*time.Millisecond - time.Nanosecond,
			wantRetries:  1,
		},
		{
			name:         "more attempts back off exponentially",
			edit:         func(c *Config) { c.MaxAttempts = 4 },
			steps:        []step{fail, fail, fail, ok},
			wantAttempts: 4,
			wantElapsed:  (50+100+200)*time.Millisecond - 3*time.Nanosecond,
			wantRetries:  3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, tt.edit)
				if tt.open {
					b.p.cfg.MaxAttempts = 1
					openBreaker(t, b)
					b.p.cfg.MaxAttempts = 2
				}
				ctx := context.Background()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				s := &script{steps: tt.steps}
				start := time.Now()
				_, err := Do(ctx, b.p, s.call)

				if got, want := s.attempts, tt.wantAttempts; got != want {
					t.Errorf("attempts = %d, want %d", got, want)
				}
				if len(tt.wantErrs) == 0 && err != nil {
					t.Errorf("err = %v, want nil", err)
				}
				for _, want := range tt.wantErrs {
					if !errors.Is(err, want) {
						t.Errorf("err = %v, want it to wrap %v", err, want)
					}
				}
				if got, want := time.Since(start), tt.wantElapsed; got != want {
					t.Errorf("elapsed = %v, want %v", got, want)
				}
				retries := counterValue(t, b.m.retryAttempts.WithLabelValues("payment"))
				if got, want := int(retries), tt.wantRetries; got != want {
					t.Errorf("retries metric = %d, want %d", got, want)
				}
			})
		})
	}
}

func TestTimeoutWrapsTheCallsError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
		start := time.Now()
		_, err := b.do(hang)
		if got, want := time.Since(start), 500*time.Millisecond; got != want {
			t.Errorf("returned after %v, want %v", got, want)
		}
		for _, want := range []error{ErrTimeout, context.DeadlineExceeded} {
			if !errors.Is(err, want) {
				t.Errorf("err = %v, want it to wrap %v", err, want)
			}
		}
		if got, want := b.calls(t, outcomeSlow), 1; got != want {
			t.Errorf("slow calls = %d, want %d (counted at 400 ms, before the timeout)", got, want)
		}
	})
}

func TestCallerCancellationIsExcluded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.WindowSize, c.MinCalls = 1, 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		s := &script{steps: []step{hang}}
		_, err := Do(ctx, b.p, s.call)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
			t.Errorf("err = %v, want the caller's deadline, not ErrTimeout", err)
		}
		b.expect(t, s, 1, outcomeExcluded)
	})
}

func TestBulkheadFullThroughPolicy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.WindowSize, c.MinCalls, c.LimitInitial, c.LimitMin, c.LimitMax = 1, 1, 1, 1, 1 })
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _, _ = Do(ctx, b.p, hang.call) }()
		synctest.Wait()

		s := &script{steps: []step{ok}}
		start := time.Now()
		_, err := Do(context.Background(), b.p, s.call)
		if !errors.Is(err, ErrBulkheadFull) {
			t.Errorf("err = %v, want ErrBulkheadFull", err)
		}
		if got, want := time.Since(start), b.p.cfg.BulkheadWait; got != want {
			t.Errorf("rejected after %v, want %v (the bulkhead wait, no retry)", got, want)
		}
		b.expect(t, s, 0, outcomeRejected)
		cancel()
	})
}

func TestModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode         Mode
		wantDeadline bool
		wantState    State
		wantCalls    int
	}{
		{ModeNone, false, StateClosed, 20},
		{ModeTimeout, true, StateClosed, 20},
		{ModeProtected, true, StateOpen, 10}, // 5 calls tried twice trip it; the rest are rejected
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, func(c *Config) { c.Mode = tt.mode })
				var calls int
				var sawDeadline bool
				for range 20 {
					_, _ = Do(context.Background(), b.p, func(ctx context.Context) (string, error) {
						calls++
						_, sawDeadline = ctx.Deadline()
						return "", errUnavailable
					})
				}
				if got, want := sawDeadline, tt.wantDeadline; got != want {
					t.Errorf("call saw a deadline = %v, want %v", got, want)
				}
				if got, want := b.p.State(), tt.wantState; got != want {
					t.Errorf("state = %v, want %v", got, want)
				}
				if got, want := calls, tt.wantCalls; got != want {
					t.Errorf("calls made = %d, want %d", got, want)
				}
			})
		})
	}
}

func TestTwoPoliciesShareOneRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"payment", "payment-worker"} {
		if _, err := New(name, DefaultConfig(), Options{Metrics: m}); err != nil {
			t.Errorf("New(%q) = %v", name, err)
		}
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering the metrics twice on one registry: err = nil, want an error")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	states := 0
	for _, f := range families {
		if f.GetName() == "resilience_breaker_state" {
			states = len(f.GetMetric())
		}
	}
	if got, want := states, 2; got != want {
		t.Errorf("resilience_breaker_state series = %d, want %d", got, want)
	}
}

func TestRateSpacesCallsAndRefusesALateTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.Rate = 10 })
		s := &script{steps: []step{ok}}
		start := time.Now()
		for range 5 {
			if _, err := Do(context.Background(), b.p, s.call); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := time.Since(start), 400*time.Millisecond; got != want {
			t.Errorf("5 calls at 10/s took %v, want %v (the first at once, then one each 100 ms)", got, want)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := Do(ctx, b.p, s.call)
		if !errors.Is(err, ErrPaced) || !Refused(err) {
			t.Errorf("err = %v, want ErrPaced, a refusal", err)
		}
		if s.attempts != 5 {
			t.Errorf("attempts = %d, want 5: a call whose turn comes after its deadline is not made", s.attempts)
		}
	})
}

// TestAnUnretryableFailureIsAFailureNotRetried: the dependency's trouble
// counts against the breaker, but the call is not made again when the
// dependency said another attempt would not help.
func TestAnUnretryableFailureIsAFailureNotRetried(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		attempts := 0
		_, err := Do(context.Background(), b.p, func(context.Context) (string, error) {
			attempts++
			return "", errNoRetry
		})
		if !errors.Is(err, errNoRetry) || attempts != 1 {
			t.Errorf("err = %v after %d attempts, want errNoRetry after 1", err, attempts)
		}
		if got := b.calls(t, outcomeFailure); got != 1 {
			t.Errorf("failures = %d, want 1: it is the dependency's trouble", got)
		}
	})
}
