package payment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// Protected is the Client behind the resilience stack: retry → circuit
// breaker → bulkhead → per-attempt timeout → Charge, or a page of
// FindCharges or ListCharges. Both the API and the worker charge through one
// of these, each with a Policy of its own.
type Protected struct {
	client *Client
	policy *resilience.Policy
	log    *slog.Logger
	// heldUntil is when the provider's last Retry-After (a 429) ends, in
	// Unix nanoseconds: until then no call is sent (ErrHeldBack).
	heldUntil atomic.Int64
}

// ErrHeldBack: the call was not sent, because the provider answered an
// earlier call of this client 429 and its Retry-After has not passed. A
// provider over its rate limit refuses every call until then, so sending
// more would only add refusals; like the stack's refusals (IsRefused), it
// cost the provider nothing and means "try again after RetryAfter".
var ErrHeldBack = errors.New("payment: call held back until the provider's Retry-After has passed")

// do runs fn through p's stack unless a Retry-After holds calls back, and
// holds them back after a 429 for as long as it asks.
func do[T any](ctx context.Context, p *Protected, fn func(context.Context) (T, error)) (T, error) {
	if wait := p.heldFor(); wait > 0 {
		var zero T
		return zero, fmt.Errorf("%w (%v left)", ErrHeldBack, wait.Round(time.Millisecond))
	}
	v, err := resilience.Do(ctx, p.policy, fn)
	if IsKeyReused(err) {
		// Our bug, and one that leaves an order's outcome unknown: a person must look.
		p.log.ErrorContext(ctx, "payment provider refused an idempotency key reused with other parameters", "err", err)
	}
	if wait, ok := RetryAfterOf(err); ok {
		until := time.Now().Add(wait).UnixNano()
		for old := p.heldUntil.Load(); old < until && !p.heldUntil.CompareAndSwap(old, until); old = p.heldUntil.Load() {
		}
	}
	return v, err
}

// heldFor is what is left of the provider's last Retry-After.
func (p *Protected) heldFor() time.Duration {
	return max(0, time.Until(time.Unix(0, p.heldUntil.Load())))
}

// NewProtected wraps client with policy. Build policy with Classify set to
// this package's Classify, so declines and our own bad requests neither
// trip the breaker nor get retried. log receives the alert of a key reused
// with other parameters (IsKeyReused); nil discards it.
func NewProtected(client *Client, policy *resilience.Policy, log *slog.Logger) *Protected {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Protected{client: client, policy: policy, log: log}
}

// NewProtectedClient builds the whole protected client for one role: a
// Client for the provider ccfg names (its base URL and secret key) behind a
// Policy called name (its metrics and logs label), whose probe is
// Client.Probe: a charge that would go out while every slot is held for
// calls a hung provider may still be working on goes only after a read has
// come back in time.
//
// The connection cap is the most calls the policy's concurrency limit
// ever admits (twice the adaptive limit's maximum, as calls given up on keep
// theirs until answered; not its current value) — more connections could never be used at once, fewer
// would make calls queue inside net/http, invisible to the limit's
// metrics — and outside protected mode there is no cap at all, since a cap
// is a bulkhead too.
func NewProtectedClient(name string, ccfg Config, cfg resilience.Config, m *resilience.Metrics, log *slog.Logger) (*Protected, error) {
	ccfg.MaxConns = cfg.MaxConcurrency()
	if ccfg.MaxConns == 0 {
		ccfg.MaxConns = -1
	}
	client, err := NewClient(ccfg)
	if err != nil {
		return nil, err
	}
	policy, err := resilience.New(name, cfg, resilience.Options{Classify: Classify, Metrics: m, Logger: log, Probe: client.Probe})
	if err != nil {
		return nil, err
	}
	return NewProtected(client, policy, log), nil
}

// Charge charges req through the stack. Besides the errors Client.Charge
// returns, it may return resilience.ErrOpen, resilience.ErrTooManyRequests,
// resilience.ErrBulkheadFull, resilience.ErrProbeFailed or ErrHeldBack
// without sending the charge; all of them, like transient errors, mean "try later with the
// same order".
func (p *Protected) Charge(ctx context.Context, req ChargeRequest) (Receipt, error) {
	return do(ctx, p, func(ctx context.Context) (Receipt, error) {
		return p.client.Charge(ctx, req)
	})
}

// RetryAfter is how long until the stack lets a call through again (the
// breaker, the concurrency limit) and the provider's last Retry-After has
// passed.
func (p *Protected) RetryAfter() time.Duration { return max(p.policy.RetryAfter(), p.heldFor()) }

// Classify tells the resilience stack which errors are the provider's
// trouble (transient: count against the breaker, retry) and which are final
// answers for this call (declined, a request the provider rejected, a
// PaymentIntent pending, a key reused with other parameters, a 409: another
// call with the same key is still in progress there, or a 429: the call was
// over the provider's rate limit). A pending PaymentIntent and a reused key
// are the same answer again on a retry with the key; neither says anything
// against the provider's health.
//
// A 409 stays ErrTransient for the order — it is not charged yet, and may
// be — but the provider answered it at once, so it says nothing against
// the provider's health, and an immediate retry would meet the same call
// still in progress. Counting it as a failure would re-open the breaker
// when the worker's recovery drain meets orders whose hung calls the
// provider still holds.
//
// A 429 is the same for the breaker: the provider answered at once,
// charged nothing and said when to come back (RetryAfterOf). Counting it
// would open the breaker — which the fleet shares — while the provider is
// healthy, deferring every live order with the backlog; retrying within
// the call would meet the same limit. The caller waits for its Retry-After
// instead. A lookup or a list answered 429 is classified alike.
func Classify(err error) resilience.Class {
	if errors.Is(err, ErrDeclined) || errors.Is(err, ErrPermanent) || errors.Is(err, ErrPending) ||
		IsInProgress(err) || IsThrottled(err) || IsKeyReused(err) {
		return resilience.Final
	}
	if e, ok := errors.AsType[*Error](err); ok && e.NoRetry {
		return resilience.Unretryable // the provider's trouble, but it said another attempt will not help
	}
	return resilience.Transient
}

// IsInProgress reports whether the provider answered a charge attempt 409:
// an earlier attempt under the same idempotency key is still being
// processed. It is transient — the next attempt replays that one's answer
// once it is done — but says nothing against the provider's health.
func IsInProgress(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && !e.lookup && e.StatusCode == http.StatusConflict
}

// IsRefused reports whether the protection stack turned the call away
// without sending it: the breaker is open (or half-open with its probes in
// flight), the bulkhead stayed full, the lookup sent before it over a
// limit full of held calls failed (resilience.ErrProbeFailed), or the
// provider's last Retry-After has not passed (ErrHeldBack). Such a call
// cost the provider nothing and is worth trying again once RetryAfter has
// passed.
func IsRefused(err error) bool { return resilience.Refused(err) || errors.Is(err, ErrHeldBack) }

// Policy is the stack the client's calls go through, for a coordinator
// that shares its breaker with other processes (internal/fleet).
func (p *Protected) Policy() *resilience.Policy { return p.policy }
