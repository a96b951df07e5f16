package resilience

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// ErrTimeout means the call's attempt, not its caller, ran out of time.
var ErrTimeout = errors.New("resilience: attempt timed out")

// ErrPaced means the call was not made: its turn under Config.Rate falls past its deadline.
var ErrPaced = errors.New("resilience: the call's turn under the policy's rate comes after its deadline")

// ErrProbeFailed means the call was not made: the [Options.Probe] sent
// before it over held slots failed or was slow. It wraps only a caller's
// context error: a timed-out probe is no timed-out call.
var ErrProbeFailed = errors.New("resilience: the call was not made: the probe sent before it failed")

// Class says what an error of the protected call means: [Options.Classify].
type Class uint8

const (
	// Transient means the dependency is in trouble (a 5xx, a refused
	// connection, an unparseable answer): a breaker failure, worth retrying.
	Transient Class = iota
	// Final means the dependency answered, and would answer the same again
	// (a card decline, a 4xx): no breaker failure, not retried.
	Final
	// Unretryable means in trouble, but another attempt would not help
	// (Stripe-Should-Retry: false on a 5xx): a breaker failure, not retried.
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
	// Logger receives breaker transitions and retries; nil: slog.Default().
	Logger *slog.Logger
	// Rand returns a uniform int64 in [0, n) for backoff and open-duration
	// jitter; nil means math/rand/v2's Int64N.
	Rand func(n int64) int64
	// Probe, if set, asks the dependency a question that changes nothing.
	// A call over held slots sends it first (L5, Policy.probeFirst), so that
	// a dependency still hanging holds a question, not a payment.
	Probe func(context.Context) error
}

// Policy protects calls to one named dependency, safe for concurrent use:
// build one per dependency and process role, and share it.
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

// New builds the policy for the dependency name, its metrics' and logs' label.
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
		log:      cmp.Or(opts.Logger, slog.Default()),
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
	if cfg.Mode != ModeProtected {
		p.events = newEventQueue()
		return p, nil
	}
	p.breaker = newBreaker(name, cfg, m, p.log, p.rnd)
	p.limit = newLimiter(cfg.LimitInitial, cfg.LimitMin, cfg.LimitMax, cfg.LimitBackoff, cfg.BulkheadWait, m.limiterMetrics(name))
	p.limit.lateFactor = cfg.LimitLateFactor
	p.limit.yields = cfg.Background
	p.limit.probeEvery = cfg.OpenDuration
	p.breaker.limit = p.limit
	p.events = p.breaker.events
	if cfg.Rate > 0 {
		p.pace = rate.NewLimiter(rate.Limit(cfg.Rate), 1)
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

// Limit returns the concurrency limit now; 0 outside ModeProtected.
func (p *Policy) Limit() int {
	if p.limit == nil {
		return 0
	}
	limit, _ := p.limit.current()
	return limit
}

// RetryAfter returns how long until the stack lets a call through, 0 when nothing
// refuses: for a Retry-After header, or to snooze background work meanwhile.
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

// Do calls fn, which must honour its context, through p's layers: retry,
// pace (P1), breaker, limit, timeout. It returns fn's result or an error the
// package doc lists, wrapping fn's own if fn returned before its caller left.
func Do[T any](ctx context.Context, p *Policy, fn func(context.Context) (T, error)) (T, error) {
	switch p.cfg.Mode {
	case ModeNone:
		return fn(ctx)
	case ModeTimeout:
		v, _, err := withTimeout(ctx, p.cfg.AttemptTimeout, fn)
		return v, err
	}
	var zero T
	var prev error
	for n := 1; ; n++ {
		if !budgetAllows(ctx, 0) {
			return zero, cmp.Or(prev, ctx.Err())
		}
		if p.pace != nil {
			if err := p.pace.Wait(ctx); err != nil {
				return zero, fmt.Errorf("%w: %w", ErrPaced, err)
			}
		}
		v, retry, err := attempt(ctx, p, fn)
		if err == nil {
			return v, nil
		}
		if Refused(err) {
			traceRejected(ctx, p, n, err)
			if prev != nil {
				// Keep the failure that made us retry; the refusal is
				// what the caller's fallback decides on.
				err = fmt.Errorf("%w (attempt %d); attempt %d: %w", err, n, n-1, prev)
			}
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
		p.log.LogAttrs(ctx, slog.LevelInfo, "retrying call", slog.String("name", p.name), slog.Int("attempt", n+1),
			slog.Duration("backoff", delay), slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(delay):
		}
		prev = err
	}
}

// Refused reports whether the stack turned a call away without making it,
// at no cost to the dependency.
func Refused(err error) bool {
	return errors.Is(err, ErrOpen) || errors.Is(err, ErrTooManyRequests) ||
		errors.Is(err, ErrBulkheadFull) || errors.Is(err, ErrProbeFailed) || errors.Is(err, ErrPaced)
}

// attempt makes one attempt and reports whether another may help.
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
		// fn panicked: report a failure, or a half-open breaker would wait
		// for this probe for ever; a bug of ours is no congestion signal.
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
	v, timedOut, gone, err := send(ctx, p, sent, fn)
	completed = true
	return v, p.settle(ctx, c, sent, timedOut, err, gone), err
}

// send is withTimeout, except that with an abandoned-call hold a call given
// up on is not cancelled: it runs on, detached from its caller, until the
// dependency answers or the hold ends (L3), and gone is closed then; nil
// when fn returned to its caller. A panic reaches a caller still waiting.
func send[T any](ctx context.Context, p *Policy, sent time.Time, fn func(context.Context) (T, error)) (v T, timedOut bool, gone <-chan struct{}, err error) {
	if p.cfg.AbandonedHold <= 0 || ctx.Err() != nil { // a caller gone already: nothing to send
		v, timedOut, err = withTimeout(ctx, p.cfg.AttemptTimeout, fn)
		return v, timedOut, nil, err
	}
	type result struct {
		v        T
		err      error
		panicked any
	}
	out, left, done := make(chan result), make(chan struct{}), make(chan struct{})
	go func() {
		var r result
		defer func() {
			r.panicked = recover()
			select {
			case out <- r:
			case <-left:
				if r.panicked != nil {
					p.log.Error("a call given up on panicked", "name", p.name, "panic", r.panicked, "stack", string(debug.Stack()))
				}
			}
			close(done)
		}()
		fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), sent.Add(p.cfg.AbandonedHold))
		defer cancel()
		r.v, r.err = fn(fctx)
	}()
	select {
	case r := <-out:
		if r.panicked != nil {
			panic(r.panicked)
		}
		return r.v, false, nil, r.err
	case <-time.After(p.cfg.AttemptTimeout - time.Since(sent)):
	case <-ctx.Done():
	}
	close(left)
	// The caller's own end, its deadline no later than the attempt's, is no timeout (withTimeout).
	if d, ok := ctx.Deadline(); ctx.Err() != nil || ok && !d.After(sent.Add(p.cfg.AttemptTimeout)) {
		return v, false, done, cmp.Or(ctx.Err(), context.DeadlineExceeded)
	}
	return v, true, done, fmt.Errorf("%w after %v: %w", ErrTimeout, p.cfg.AttemptTimeout, context.DeadlineExceeded)
}

// probeFirst sends Options.Probe in the slot and admission of call c (L5).
// An answer before the slow threshold, a final one too, is no verdict: it
// restarts c's clock and returns a fresh send time. Any other outcome is:
// probeFirst settles c with it and returns ErrProbeFailed.
func (p *Policy) probeFirst(ctx context.Context, c *call, sent time.Time) (time.Time, error) {
	_, timedOut, gone, err := send(ctx, p, time.Now(), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, p.probe(ctx)
	})
	answered := err == nil || (!timedOut && ctx.Err() == nil && p.classify(err) == Final)
	if answered && c.restartClock() {
		return time.Now(), nil // the probe's latency is not the call's
	}
	p.settle(ctx, c, sent, timedOut, err, gone)
	// Not wrapped: the call was not made, so it neither timed out nor failed.
	if ctx.Err() != nil {
		return sent, fmt.Errorf("%w: %w", ErrProbeFailed, ctx.Err())
	}
	why := "answered after the slow threshold"
	if err != nil {
		why = err.Error()
	}
	return sent, fmt.Errorf("%w: %s", ErrProbeFailed, why)
}

// admit asks the breaker, then the limit, for a call: its tracker and
// whether it holds the slot over the limit, or the refusal, reported.
func admit(ctx context.Context, p *Policy) (c *call, overLimit bool, err error) {
	c, err = p.breaker.allow()
	if err != nil {
		return nil, false, err // the breaker's verdict: retrying would only be refused again
	}
	overLimit, err = p.limit.acquireProbe(ctx, c.isProbe)
	if err != nil {
		// A reached limit, or a caller gone while queueing, says nothing of
		// the dependency: excluded, not retried into the load. Unless the
		// dependency refuses (L7): a failure, so that the breaker opens, and
		// tells the fleet, with too few calls to judge. A probe refused
		// beside another one over the limit is no verdict.
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
		// for its slot (L8): the outage noticed meanwhile gets nothing more.
		if overLimit {
			p.limit.endProbe()
		}
		p.limit.release(noSignal)
		c.finish(errReportExcluded, p.breaker.calls.rejected)
		return nil, false, p.breaker.rejectedReason(err)
	}
	return c, overLimit, nil
}

// settle reports how c's call ended to the breaker and the limit, frees its
// slot, now or once gone closes, and reports whether to try again.
func (p *Policy) settle(ctx context.Context, c *call, sent time.Time, timedOut bool, err error, gone <-chan struct{}) (retry bool) {
	calls := &p.breaker.calls
	// Timeouts and transient errors are congestion, successes health, final
	// answers and callers that gave up neither; finish says if it is news.
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
	if gone != nil {
		free := p.limit.hold(s, sent.Add(p.cfg.AbandonedHold))
		go func() { <-gone; free() }()
	} else {
		p.limit.release(s)
	}
	return retry
}

// withTimeout gives fn at most d and wraps that timeout, not the caller's, in ErrTimeout.
func withTimeout[T any](ctx context.Context, d time.Duration, fn func(context.Context) (T, error)) (v T, timedOut bool, err error) {
	actx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	v, err = fn(actx)
	if err != nil && ctx.Err() == nil && actx.Err() == context.DeadlineExceeded {
		return v, true, fmt.Errorf("%w after %v: %w", ErrTimeout, d, err)
	}
	return v, false, err
}
