package resilience

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// ErrTimeout wraps the call's error when an attempt ran out of its
// per-attempt timeout (and not out of the caller's deadline).
var ErrTimeout = errors.New("resilience: attempt timed out")

// ErrPaced means the call was not made: under the policy's Rate its turn
// would come after the caller's deadline.
var ErrPaced = errors.New("resilience: the call's turn under the policy's rate comes after its deadline")

// ErrProbeFailed means the call was not made: it was to go over a limit
// full of held slots, and the question sent before it ([Options.Probe])
// failed or ran past the slow threshold. It wraps only the caller's context
// error, if that ended the probe: a timed-out probe is no timed-out call.
var ErrProbeFailed = errors.New("resilience: the call was not made: the probe sent before it failed")

// Class says what an error returned by the protected call means for the
// stack. The package cannot know; the caller's [Options.Classify] decides.
type Class uint8

const (
	// Transient means the dependency is in trouble (5xx, 429, connection
	// refused, unparseable answer): the error counts as a breaker failure
	// and the call is worth another attempt.
	Transient Class = iota
	// Final means the dependency answered and another attempt would get
	// the same answer (a card decline, a 4xx): it is neither a breaker
	// failure nor retried.
	Final
	// Unretryable means the dependency is in trouble, a breaker failure,
	// but said that another attempt now would not help (Stripe's
	// Stripe-Should-Retry: false on a 5xx): it is not retried.
	Unretryable
)

// Options carries what a Policy needs besides numbers.
type Options struct {
	// Classify judges the errors the call returns. nil treats every error
	// as Transient. It never sees caller cancellation or attempt timeouts:
	// the policy recognises those itself (excluded and Transient).
	Classify func(error) Class
	// Metrics receives the policy's metrics; nil keeps them unregistered.
	Metrics *Metrics
	// Logger receives breaker transitions and retries; nil means
	// slog.Default().
	Logger *slog.Logger
	// Rand returns a uniform int64 in [0, n) for backoff and open-duration
	// jitter; nil means math/rand/v2's Int64N. Tests inject their own.
	Rand func(n int64) int64
	// Probe, if set, asks the dependency a question that changes nothing
	// there (a read). A call that is to go over a limit full of held slots
	// (L5; limiter.acquireProbe) sends it first, in the same slot and
	// breaker admission, so that a dependency still hanging holds a
	// question, not a payment. Answered before the slow threshold (a final
	// answer counts), the call follows on a fresh clock and its outcome is
	// the verdict; otherwise the probe's is, and Do returns ErrProbeFailed.
	Probe func(context.Context) error
}

// Policy protects calls to one named dependency. It is safe for concurrent
// use; build one per dependency and process role (the API and the worker
// each have their own, as docs/design.md, "Protection stack" asks) and share it.
type Policy struct {
	name     string
	cfg      Config
	classify func(error) Class
	rnd      func(int64) int64
	log      *slog.Logger
	breaker  *breaker // nil unless ModeProtected
	events   *eventQueue
	limit    *limiter // nil unless ModeProtected
	probe    func(context.Context) error
	pace     *rate.Limiter // nil without a Rate
	retries  prometheus.Counter
	backoffs prometheus.Observer
}

// New builds the policy for the dependency called name; name labels its
// metrics and logs.
func New(name string, cfg Config, opts Options) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("resilience policy %q: %w", name, err)
	}
	m := opts.Metrics
	if m == nil {
		m, _ = NewMetrics(nil) // cannot fail without a registry
	}
	p := &Policy{
		name:     name,
		cfg:      cfg,
		classify: opts.Classify,
		rnd:      opts.Rand,
		log:      opts.Logger,
		probe:    opts.Probe,
		retries:  m.retryAttempts.WithLabelValues(name),
		backoffs: m.retryBackoff.WithLabelValues(name),
	}
	if p.classify == nil {
		p.classify = func(error) Class { return Transient }
	}
	if p.rnd == nil {
		p.rnd = rand.Int64N
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	p.events = newEventQueue() // replaced by the breaker's in ModeProtected
	if cfg.Mode == ModeProtected {
		p.breaker = newBreaker(name, cfg, m, p.log, p.rnd)
		lm := m.limiterMetrics(name)
		p.limit = newLimiter(cfg.LimitInitial, cfg.LimitMin, cfg.LimitMax, cfg.LimitBackoff, cfg.BulkheadWait, lm)
		p.limit.lateFactor = cfg.LimitLateFactor
		p.limit.yields = cfg.Background
		p.limit.probeEvery = cfg.OpenDuration
		p.breaker.limit = p.limit
		if cfg.Rate > 0 {
			p.pace = rate.NewLimiter(rate.Limit(cfg.Rate), 1)
		}
		p.events = p.breaker.events
	}
	return p, nil
}

// Name returns the dependency's name.
func (p *Policy) Name() string { return p.name }

// Mode returns the mode the policy was built with.
func (p *Policy) Mode() Mode { return p.cfg.Mode }

// State returns the breaker's state; always closed outside ModeProtected.
func (p *Policy) State() State {
	if p.breaker == nil {
		return StateClosed
	}
	return p.breaker.state()
}

// Limit returns how many calls the concurrency limit lets run at once now
// (resilience_concurrency_limit); 0 outside ModeProtected.
func (p *Policy) Limit() int {
	if p.limit == nil {
		return 0
	}
	limit, _ := p.limit.current()
	return limit
}

// RetryAfter returns how long until the stack lets a call through: what is
// left of the breaker's open state, or, when held slots fill the limit,
// until a call may go over it or its answer is due (limiter.retryIn); 0
// when nothing refuses. Callers use it for the HTTP Retry-After header and
// to snooze background work instead of piling onto a failing dependency.
func (p *Policy) RetryAfter() time.Duration {
	if p.breaker == nil {
		return 0
	}
	// A call over a full limit may ask the probe first: its answer is due
	// within two attempt timeouts.
	answerWithin := p.cfg.AttemptTimeout
	if p.probe != nil {
		answerWithin *= 2
	}
	if wait := p.breaker.retryAfter(answerWithin); wait > 0 {
		return wait
	}
	return p.limit.retryIn(answerWithin)
}

// Do calls fn through p's layers, outermost first: retry, pace (each
// attempt), circuit breaker, concurrency limit, per-attempt timeout. fn must
// honour the context it is given. It returns fn's result, or one of the errors the
// package doc lists; errors are wrapped, never replaced.
func Do[T any](ctx context.Context, p *Policy, fn func(context.Context) (T, error)) (T, error) {
	switch p.cfg.Mode {
	case ModeNone:
		return fn(ctx)
	case ModeTimeout:
		v, _, err := withTimeout(ctx, p.cfg.AttemptTimeout, fn)
		return v, err
	}
	var prev error
	for n := 1; ; n++ {
		if !budgetAllows(ctx, 0) {
			var zero T
			if prev != nil {
				return zero, prev
			}
			return zero, ctx.Err()
		}
		if p.pace != nil {
			if err := p.pace.Wait(ctx); err != nil {
				var zero T
				return zero, fmt.Errorf("%w: %w", ErrPaced, err)
			}
		}
		v, retry, err := attempt(ctx, p, fn)
		if err == nil {
			return v, nil
		}
		if Refused(err) {
			traceRejected(ctx, p, n, err)
		}
		if prev != nil && Refused(err) {
			// Keep the failure that made us retry; the refusal is what
			// the caller's fallback decides on.
			err = fmt.Errorf("%w (attempt %d); attempt %d: %w", err, n, n-1, prev)
		}
		if !retry || n == p.cfg.MaxAttempts {
			return v, err
		}
		delay := backoff(n, p.cfg.BackoffBase, p.cfg.BackoffMax, p.rnd)
		if !budgetAllows(ctx, delay) {
			return v, err // sleeping would run into the caller's deadline
		}
		p.retries.Inc()
		p.backoffs.Observe(delay.Seconds())
		traceRetry(ctx, p, n, delay, err)
		p.log.LogAttrs(ctx, slog.LevelInfo, "retrying call",
			slog.String("name", p.name), slog.Int("attempt", n+1),
			slog.Duration("backoff", delay), slog.String("error", err.Error()))
		if !sleep(ctx, delay) {
			return v, err
		}
		prev = err
	}
}

// Refused reports whether the stack turned a call away without making it
// (ErrOpen, ErrTooManyRequests, ErrBulkheadFull, ErrProbeFailed, ErrPaced):
// such a call cost the dependency nothing.
func Refused(err error) bool {
	return errors.Is(err, ErrOpen) || errors.Is(err, ErrTooManyRequests) ||
		errors.Is(err, ErrBulkheadFull) || errors.Is(err, ErrProbeFailed) || errors.Is(err, ErrPaced)
}

// attempt makes one attempt through the breaker, the concurrency limit and
// the per-attempt timeout, and reports whether another attempt may help.
func attempt[T any](ctx context.Context, p *Policy, fn func(context.Context) (T, error)) (v T, retry bool, err error) {
	c, overLimit, err := admit(ctx, p)
	if err != nil {
		return v, false, err
	}
	if overLimit {
		defer p.limit.endProbe()
	}
	c.startClock()
	sent := time.Now()
	completed := false
	defer func() {
		// fn panicked (or called runtime.Goexit): free the slot and report
		// a failure, or a half-open breaker would wait for this probe
		// forever. A panic is a bug of ours, not the dependency's
		// congestion, so the limit hears no signal. The panic carries on.
		if !completed {
			c.finish(errReportFailure, p.breaker.calls.failure)
			p.limit.release(noSignal)
		}
	}()
	if overLimit && p.probe != nil {
		if sent, err = p.probeFirst(ctx, c, sent); err != nil {
			completed = true // probeFirst settled it
			return v, false, err
		}
	}
	v, timedOut, err := withTimeout(ctx, p.cfg.AttemptTimeout, fn)
	completed = true
	return v, p.settle(ctx, c, sent, timedOut, err), err
}

// probeFirst sends the policy's probe in the slot and admission of the
// call c stands for, sent at sent (Options.Probe). An answer
// before the slow threshold — a final one too, such as a 4xx: the
// dependency answered — is no verdict yet: it returns a fresh send time
// for the call, whose clock it restarts, and whose outcome is
// what the breaker and the limit will hear, as without a probe. Any other
// outcome is the verdict: probeFirst settles c with it and returns
// ErrProbeFailed.
func (p *Policy) probeFirst(ctx context.Context, c *call, sent time.Time) (time.Time, error) {
	_, timedOut, err := withTimeout(ctx, p.cfg.AttemptTimeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, p.probe(ctx)
	})
	answered := err == nil || (!timedOut && ctx.Err() == nil && p.classify(err) == Final)
	if answered && c.restartClock() {
		return time.Now(), nil // the probe's latency is not the call's
	}
	p.settle(ctx, c, sent, timedOut, err)
	// The probe's error as text, not wrapped: the call was not made, so
	// it did not time out or fail. Only the caller's own end stays
	// reachable.
	if ctx.Err() != nil {
		return sent, fmt.Errorf("%w: %w", ErrProbeFailed, ctx.Err())
	}
	why := "answered after the slow threshold"
	if err != nil {
		why = err.Error()
	}
	return sent, fmt.Errorf("%w: %s", ErrProbeFailed, why)
}

// admit asks the breaker, then the concurrency limit, for a call: it
// returns the call's tracker and whether it holds the slot over a limit
// full of held slots (overLimit), or the refusal, already reported.
func admit(ctx context.Context, p *Policy) (c *call, overLimit bool, err error) {
	c, err = p.breaker.allow()
	if err != nil {
		return nil, false, err // the breaker's verdict: retrying would only be refused again
	}
	overLimit, err = p.limit.acquireProbe(ctx, c.isProbe)
	if err != nil {
		// A reached limit or a caller that gave up while queueing says
		// nothing about the dependency: excluded, and not retried, since
		// another attempt would only add to the load that filled it —
		// unless every slot is kept for a call the dependency never
		// answered, and it has answered nothing in time since
		// (heldRefuses): then the dependency is what refuses, and the
		// breaker counts it as a failure, so that it opens (and tells the
		// fleet) although the limit leaves it too few calls to judge.
		// A probe refused while another probe holds the slot over the
		// limit is no verdict either: that probe's answer is.
		report, counter := errReportExcluded, p.breaker.calls.rejected
		switch {
		case !errors.Is(err, ErrBulkheadFull):
			counter = p.breaker.calls.excluded
		case p.limit.heldRefuses() && !c.isProbe():
			report = errReportFailure
		}
		c.finish(report, counter)
		return nil, false, err
	}
	if err := p.breaker.refusesNow(c); err != nil {
		// The breaker opened, here or for the fleet, while the call waited
		// for its slot: the verdict it was admitted under is stale, and the
		// outage noticed meanwhile gets nothing more from it.
		if overLimit {
			p.limit.endProbe()
		}
		p.limit.release(noSignal)
		c.finish(errReportExcluded, p.breaker.calls.rejected)
		return nil, false, p.breaker.rejectedReason(err)
	}
	return c, overLimit, nil
}

// settle reports how the call c tracks ended (err, and whether its attempt
// timed out) to the breaker and the limit, and frees its slot, at once or
// after the abandoned-call hold. It reports whether another attempt may
// help.
func (p *Policy) settle(ctx context.Context, c *call, sent time.Time, timedOut bool, err error) (retry bool) {
	abandoned := timedOut || (err != nil && ctx.Err() != nil)
	calls := &p.breaker.calls
	// The breaker and the limit hear the same outcome, once: a call the
	// slow timer already reported (finish returns false) is not told again.
	// Timeouts and transient errors are congestion; successes are health;
	// final answers and callers that gave up are neither.
	p.limit.returned(sent, err == nil)
	s := noSignal
	switch {
	case err == nil:
		if c.finish(nil, calls.success) {
			s = healthy
		}
	case timedOut:
		if c.finish(errReportFailure, calls.failure) {
			s = congested
		}
		retry = true
	case ctx.Err() != nil:
		c.finish(errReportExcluded, calls.excluded) // the caller gave up, not the dependency
	default:
		class := p.classify(err)
		if class == Final {
			c.finish(errReportExcluded, calls.excluded)
			break
		}
		if c.finish(errReportFailure, calls.failure) { // Transient or Unretryable
			s = congested
		}
		retry = class == Transient
	}
	if abandoned {
		// Its slot stays taken until the dependency may be done with it.
		p.limit.releaseAfter(s, time.Until(sent.Add(p.cfg.AbandonedHold)))
	} else {
		p.limit.release(s)
	}
	return retry
}

// withTimeout is the innermost layer: fn gets at most d, and a timeout of
// its own (not the caller's deadline) comes back wrapped in ErrTimeout.
func withTimeout[T any](ctx context.Context, d time.Duration, fn func(context.Context) (T, error)) (v T, timedOut bool, err error) {
	actx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	v, err = fn(actx)
	if err != nil && ctx.Err() == nil && actx.Err() == context.DeadlineExceeded {
		return v, true, fmt.Errorf("%w after %v: %w", ErrTimeout, d, err)
	}
	return v, false, err
}
