package order

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Payer is the payment provider as the order package needs it: the port
// internal/orderpayment adapts the protected payment client to, so this package
// knows no HTTP. The API and the worker each have their own.
type Payer interface {
	// Charge charges req once. Its errors carry ErrDeclined, ErrRejected,
	// ErrPending, ErrRefused, ErrInProgress or ErrThrottled (errors.Is) when
	// they mean that; any other error is an unknown outcome: the provider
	// may or may not hold the charge.
	Charge(ctx context.Context, req ChargeRequest) (Receipt, error)
	// FindCharges asks the provider which successful charges it holds for
	// a reference among those created in the lookup's window (the lookup),
	// oldest first; ErrPending when it holds none but one that may still
	// succeed. It answers from the provider's strongly consistent record,
	// which outlives the provider's idempotency keys.
	FindCharges(ctx context.Context, l Lookup) ([]Receipt, error)
	// RetryAfter is how long until the provider may be called again (the
	// circuit breaker's remaining open time), 0 when it may be called now.
	RetryAfter() time.Duration
}

// ChargeRequest is one charge of an order. Reference is the order id, from
// which the provider idempotency key is derived.
type ChargeRequest struct {
	Reference     string
	Amount        int64
	Currency      string
	PaymentMethod string
}

// Lookup is the question FindCharges answers: the charges of Reference
// created from CreatedFrom to CreatedTo (see LookupFor).
type Lookup struct {
	Reference   string
	CreatedFrom time.Time
	CreatedTo   time.Time
}

// Receipt is a successful charge.
type Receipt struct {
	ChargeID string
	Amount   int64
	Currency string
	// Replayed: the provider answered from its record of an earlier
	// attempt with the same key.
	Replayed bool
}

// The kinds of a Payer's errors that are certain.
var (
	// ErrDeclined: the provider declined the payment (a business outcome).
	ErrDeclined = errors.New("payment declined")
	// ErrRejected: the provider rejected the request itself (400/422: a
	// bug on our side); retrying cannot help, and nothing was charged.
	ErrRejected = errors.New("charge request rejected by the provider")
	// ErrPending: the provider holds the order's payment neither paid nor
	// failed — processing, or waiting for the customer to authenticate
	// (requires_action). The order stays unsettled (pending_payment), and
	// another attempt under the same key would only replay that answer: the
	// outcome is learnt by lookup (Resolve), once the provider has one.
	ErrPending = errors.New("payment pending at the provider")
	// ErrRefused: the protection stack turned the call away without
	// reaching the provider (breaker open, concurrency limit full); it is
	// worth trying again once RetryAfter has passed.
	ErrRefused = errors.New("provider call refused by its circuit breaker or limit")
	// ErrInProgress: the provider is still processing an earlier attempt
	// for the order (under the same key); the outcome is unknown until it
	// is done, and the next attempt after that replays it.
	ErrInProgress = errors.New("an earlier charge attempt is still in progress at the provider")
	// ErrThrottled: the provider refused the call over its rate limit
	// (429) before processing it, and said when to come back
	// (ThrottledError). That attempt charged nothing, but an earlier one's
	// outcome stays as unknown as it was: it settles nothing, and the
	// order is charged again under the same key once the wait is over.
	ErrThrottled = errors.New("provider call over the provider's rate limit")
)

// ThrottledError is ErrThrottled with the wait the provider asked for.
type ThrottledError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *ThrottledError) Error() string        { return ErrThrottled.Error() + ": " + e.Err.Error() }
func (e *ThrottledError) Unwrap() error        { return e.Err }
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// RetryAfterOf returns how long err, a Payer's error, asks the caller to
// wait before the order's next charge attempt: the provider's Retry-After
// of a ThrottledError (ok true), else 0 and false.
func RetryAfterOf(err error) (time.Duration, bool) {
	e, ok := errors.AsType[*ThrottledError](err)
	if !ok {
		return 0, false
	}
	return e.RetryAfter, true
}

// Settlement is a transition of an unsettled order to a new status.
type Settlement struct {
	Status        Status
	ChargeID      string // paid
	FailureReason string // payment_failed
}

// chargeRequest is what the provider is asked to charge for o. Its
// reference is the order id, from which the provider idempotency key is
// derived, so every attempt for one order — the API's, the worker's — is
// the same request to the provider.
func chargeRequest(o Order) ChargeRequest {
	return ChargeRequest{
		Reference: o.ID.String(), Amount: o.Total, Currency: o.Currency, PaymentMethod: o.PaymentMethod,
	}
}

// Charge makes one charge attempt for o through p and says how it settles
// the order. This is the one decision table for charge outcomes; the API
// flow and the worker both call it:
//
//   - charged → paid, naming the charge;
//   - declined → payment_failed / card_declined;
//   - the provider rejected our request itself (400/422: a bug on our side,
//     retrying cannot help) → payment_failed / provider_rejected;
//   - the payment is pending at the provider (ErrPending: processing, or
//     requires_action) → no settlement (ok false): neither paid nor failed,
//     the order is deferred like an unknown outcome and the worker settles
//     it from the lookup once the provider has an outcome;
//   - anything else (unavailable, timed out, refused by the breaker or the
//     concurrency limit, over the provider's rate limit, ambiguous) → no
//     settlement (ok false) and the error: the caller defers the order (API)
//     or tries again later (worker), after the provider's Retry-After when
//     it sent one (RetryAfterOf).
func Charge(ctx context.Context, p Payer, o Order) (to Settlement, ok bool, err error) {
	receipt, err := p.Charge(ctx, chargeRequest(o))
	switch {
	case err == nil:
		return Settlement{Status: StatusPaid, ChargeID: receipt.ChargeID}, true, nil
	case errors.Is(err, ErrDeclined):
		return Settlement{Status: StatusPaymentFailed, FailureReason: ReasonCardDeclined}, true, err
	case errors.Is(err, ErrRejected):
		return Settlement{Status: StatusPaymentFailed, FailureReason: ReasonProviderRejected}, true, err
	}
	return Settlement{}, false, err
}

// Resolve settles o from the provider's own record instead of charging it:
// the lookup (LookupFor) turns an unknown outcome into a certain one, which
// SettlementFor decides. A lookup error settles nothing, ErrPending
// included.
//
// settleWithin is how long after an attempt began the provider has
// certainly created whatever that attempt created. The caller must make sure
// no attempt for o can still be in flight at the provider — its last attempt
// began at least settleWithin ago — or "none" could be overtaken by a charge
// that lands later.
func Resolve(ctx context.Context, p Payer, o Order, settleWithin time.Duration) (Settlement, error) {
	charges, err := p.FindCharges(ctx, LookupFor(o, settleWithin))
	if err != nil {
		return Settlement{}, err
	}
	return SettlementFor(o, charges)
}

// ClockSkew is how far the provider's clock, which stamps a charge's
// creation, may be from the database's, which stamps an order's creation and
// attempts. A lookup's window is widened by it on either side.
const ClockSkew = time.Minute

// LookupFor is the lookup that finds every charge o's attempts can have
// made: created from o's creation (no attempt precedes it) to settleWithin
// after its last attempt began, each widened by ClockSkew. The provider lists
// charges by creation time, so this window, not every charge since, is what
// a lookup reads.
func LookupFor(o Order, settleWithin time.Duration) Lookup {
	last := o.LastAttemptAt
	if last.Before(o.CreatedAt) {
		last = o.CreatedAt
	}
	return Lookup{Reference: o.ID.String(), CreatedFrom: o.CreatedAt.Add(-ClockSkew), CreatedTo: last.Add(settleWithin + ClockSkew)}
}

// SettlementFor decides how the successful charges the provider holds for
// o (oldest first) settle it. It is the one decision table for settling an
// order from the provider's record, which the lookup (Resolve) and the
// ledger reconciliation both call:
//
//   - a charge → paid, by the oldest charge (the one the idempotency key
//     made);
//   - none → payment_failed / provider_unavailable, the only way an order
//     fails for want of a provider (docs/design.md, "Invariants": never
//     while the provider holds a charge for it);
//   - a charge for another amount or currency → no settlement and
//     ErrChargeMismatch: the provider took money the order does not
//     account for, which a person must look at.
func SettlementFor(o Order, charges []Receipt) (Settlement, error) {
	if len(charges) == 0 {
		return Settlement{Status: StatusPaymentFailed, FailureReason: ReasonProviderUnavailable}, nil
	}
	for _, c := range charges {
		if c.Amount != o.Total || c.Currency != o.Currency {
			return Settlement{}, fmt.Errorf("%w: %s charged %d %s for an order of %d %s",
				ErrChargeMismatch, c.ChargeID, c.Amount, c.Currency, o.Total, o.Currency)
		}
	}
	return Settlement{Status: StatusPaid, ChargeID: charges[0].ChargeID}, nil
}

// ErrChargeMismatch: the provider holds a charge for the order that does
// not match it (see SettlementFor).
var ErrChargeMismatch = errors.New("the provider holds a charge that does not match the order")

// MayCharge reports whether o may still be charged at now, given how long
// the provider remembers idempotency keys (keyRetention): a charge sent
// after the provider forgot the order's key would be a second charge if an
// earlier attempt went through (docs/design.md, "Invariants"). The order's
// creation stands in for its first attempt — no attempt precedes it, so it
// errs on the early side — and a tenth of the retention is kept as a margin
// for clock skew between the provider, the database and this process. An
// order past that is resolved by lookup (Resolve), never charged again.
func MayCharge(o Order, keyRetention time.Duration, now time.Time) bool {
	return now.Sub(o.CreatedAt) < ChargeWindow(keyRetention)
}

// ChargeWindow is how long after its creation an order may still be
// charged, given the provider's key retention (see MayCharge).
func ChargeWindow(keyRetention time.Duration) time.Duration {
	return keyRetention - keyRetention/10
}
