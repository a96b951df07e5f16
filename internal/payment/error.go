package payment

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v82"
)

// The kinds of failure. Every error from Charge, FindCharges and ListCharges matches exactly
// one with errors.Is (a lookup or a list is never ErrDeclined or ErrPending).
var (
	// ErrDeclined: the provider refused the payment (402 card_error). A final business
	// outcome, not a provider failure: never retry it and never count it against the
	// circuit breaker.
	ErrDeclined = errors.New("payment declined")
	// ErrPermanent: the provider rejected the request itself (400 or 404
	// invalid_request_error, such as an unknown parameter or a payment method it does not
	// know), or it could not be built. Nothing was charged, and retrying cannot help: the
	// request is wrong.
	ErrPermanent = errors.New("payment request rejected")
	// ErrPending: the PaymentIntent was created but is neither paid nor failed: processing
	// (the payment method settles later) or requires_action (the customer must
	// authenticate, e.g. 3-D Secure). Retrying the create replays the same answer; the
	// outcome is learnt by looking the order up later (FindCharges).
	ErrPending = errors.New("payment pending at the provider")
	// ErrTransient: the provider is in trouble, unreachable or busy (409, 429, 5xx, 401,
	// 403, timeout, connection error, unreadable response), or answered with a charge that
	// is not the one requested (ReceiptMismatchError), or refused the key reused with other
	// parameters (IsKeyReused). The outcome is not final: an earlier attempt may have
	// charged, which FindCharges can tell. Retrying with the same key is safe. Classify says
	// which of them count against the breaker. A caller's own cancellation is transient
	// too; tell it apart with errors.Is(err, context.Canceled).
	ErrTransient = errors.New("payment provider unavailable")
)

// ReceiptMismatchError is the cause (Error.Err, under ErrTransient) of a create the provider
// answered with a succeeded PaymentIntent for another amount, currency or order than
// requested: a key collision or a provider bug. The provider reports that it holds a
// charge, so the order is neither paid by it nor certainly unpaid: it must not be settled
// either way on this answer. Another attempt with the same key most likely replays the same
// answer; the charge needs looking into (FindCharges lists what the provider holds for the
// order, with its amounts).
type ReceiptMismatchError struct {
	// ChargeID is the provider's id of the PaymentIntent it reported.
	ChargeID string
	// Want is what the attempt asked for; Got is what the provider reported.
	WantAmount, GotAmount       int64
	WantCurrency, GotCurrency   string
	WantReference, GotReference string
}

func (e *ReceiptMismatchError) Error() string {
	return fmt.Sprintf("provider reported PaymentIntent %s for %d %s (order %q), not the requested %d %s (order %q)",
		e.ChargeID, e.GotAmount, e.GotCurrency, e.GotReference, e.WantAmount, e.WantCurrency, e.WantReference)
}

// Error describes a failed create, lookup or list.
type Error struct {
	// Kind is ErrDeclined, ErrPermanent, ErrPending or ErrTransient.
	Kind error
	// StatusCode is the provider's HTTP status, or 0 when no response arrived or it could
	// not be read.
	StatusCode int
	// Type, Code and DeclineCode are Stripe's error type (card_error, invalid_request_error,
	// idempotency_error, api_error), code (card_declined, idempotency_key_in_use,
	// rate_limit, lock_timeout, …) and decline code, when the provider sent them; Message is
	// its message. For ErrPending, Code is the PaymentIntent's status.
	Type, Code, DeclineCode, Message string
	// PaymentIntent is the id of the PaymentIntent the answer concerns, when it names one.
	PaymentIntent string
	// RetryAfter is when the provider asked to be called again, for a 429 (see
	// RetryAfterOf); 0 otherwise.
	RetryAfter time.Duration
	// NoRetry: the answer said Stripe-Should-Retry: false, another attempt now would not
	// help (Classify).
	NoRetry bool
	// Err is the underlying cause: a *stripe.Error, a network error, context.DeadlineExceeded.
	Err error

	lookup bool // the error of a lookup or a list, not of a create
}

func (e *Error) Error() string {
	msg := e.Kind.Error()
	if e.StatusCode != 0 {
		msg += fmt.Sprintf(": status %d", e.StatusCode)
	}
	for _, s := range []string{e.Type, e.Code, e.DeclineCode, e.PaymentIntent, e.Message} {
		if s != "" {
			msg += ": " + s
		}
	}
	// A *stripe.Error prints itself as JSON with the whole PaymentIntent; its fields are
	// above already.
	if _, ok := errors.AsType[*stripe.Error](e.Err); e.Err != nil && !ok {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap exposes both the kind and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// classify is the one table from what the SDK returns to our kinds (docs/design.md,
// "Classification", lists each row with the test that holds it):
//
//	402 card_error                           ErrDeclined
//	409 (idempotency_key_in_use)             ErrTransient, in progress (IsInProgress)
//	429 rate_limit, lock_timeout             ErrTransient, throttled (IsThrottled, RetryAfter)
//	400 idempotency_error                    ErrTransient, our bug (IsKeyReused): alert
//	400, 404 invalid_request_error           ErrPermanent
//	401, 403                                 ErrTransient: a rotated key is an outage to fix
//	5xx api_error, any other answer          ErrTransient
//	no answer, unreadable answer, timeout    ErrTransient
//	any of those with Stripe-Should-Retry: false, not retried (Classify: Unretryable)
//
// A 409 and a 429 are told apart by status, whatever their type: Stripe answers both as
// invalid_request_error, which would otherwise read as our bug. A key reused with other
// parameters is our bug too, but unlike another rejection it does not prove that nothing
// was charged — the key's first request may have — so it never fails an order.
func classify(err error) *Error {
	se, ok := errors.AsType[*stripe.Error](err)
	if !ok {
		return &Error{Kind: ErrTransient, Err: err}
	}
	e := &Error{Kind: ErrTransient, StatusCode: se.HTTPStatusCode, Type: string(se.Type), Code: string(se.Code),
		DeclineCode: string(se.DeclineCode), Message: se.Msg, Err: se}
	if se.PaymentIntent != nil {
		e.PaymentIntent = se.PaymentIntent.ID
	}
	e.NoRetry = header(se, "Stripe-Should-Retry") == "false"
	switch {
	case se.HTTPStatusCode == http.StatusTooManyRequests:
		e.RetryAfter = parseRetryAfter(header(se, "Retry-After"), time.Now())
	case se.HTTPStatusCode == http.StatusConflict:
	case se.Type == stripe.ErrorTypeCard || se.HTTPStatusCode == http.StatusPaymentRequired:
		e.Kind = ErrDeclined
	case se.Type == stripe.ErrorTypeIdempotency:
	case se.HTTPStatusCode == http.StatusUnauthorized || se.HTTPStatusCode == http.StatusForbidden:
	case se.Type == stripe.ErrorTypeInvalidRequest && se.HTTPStatusCode < http.StatusInternalServerError:
		e.Kind = ErrPermanent
	}
	return e
}

// header returns a header of the answer an SDK error came with.
func header(se *stripe.Error, name string) string {
	if se.LastResponse == nil {
		return ""
	}
	return se.LastResponse.Header.Get(name)
}

// IsTransient reports whether err is of kind ErrTransient: the outcome is not final, and
// another attempt with the same idempotency key is safe.
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }

// IsDeclined reports whether the provider declined the payment.
func IsDeclined(err error) bool { return errors.Is(err, ErrDeclined) }

// IsPending reports whether the provider holds the order's PaymentIntent neither paid nor
// failed (ErrPending).
func IsPending(err error) bool { return errors.Is(err, ErrPending) }

// IsThrottled reports whether the provider answered 429: the call was over its rate limit
// (rate_limit) or met a lock on the object (lock_timeout). The provider refused it before
// processing it, so that attempt charged nothing, and it said when to come back
// (RetryAfterOf). It stays ErrTransient — the order is not charged yet, and an earlier
// attempt's outcome stays as unknown as it was — but it is no sign of trouble.
func IsThrottled(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.StatusCode == http.StatusTooManyRequests
}

// IsKeyReused reports whether the provider refused the idempotency key because it was first
// used with other parameters: a bug on our side (the request for an order changed between
// attempts, e.g. across a release), to alert on. The key's first request may have charged.
func IsKeyReused(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Type == string(stripe.ErrorTypeIdempotency)
}

// RetryAfterOf returns how long the provider asked the caller to wait before calling again,
// and whether err is a 429 (IsThrottled) that says so: its Retry-After, or
// DefaultThrottleWait when the answer carried none it could read.
func RetryAfterOf(err error) (time.Duration, bool) {
	e, ok := errors.AsType[*Error](err)
	if !ok || e.StatusCode != http.StatusTooManyRequests {
		return 0, false
	}
	return e.RetryAfter, true
}

// How a 429's Retry-After is read (parseRetryAfter).
const (
	// DefaultThrottleWait is the wait after a 429 without a readable Retry-After: Stripe
	// sends none with its rate limit's 429 and asks for exponential backoff from about a
	// second.
	DefaultThrottleWait = time.Second
	// MaxThrottleWait caps a Retry-After: a provider's rate limit refills within seconds,
	// and a wait of hours (a misconfigured proxy, a date far ahead) would park every order
	// the header reached. A longer limit is met again and waited out again.
	MaxThrottleWait = time.Minute
)

// parseRetryAfter reads a Retry-After header (RFC 9110, section 10.2.3): delay seconds or an
// HTTP-date, relative to now. A missing, unreadable or past value gives DefaultThrottleWait;
// anything longer than MaxThrottleWait is capped.
func parseRetryAfter(h string, now time.Time) time.Duration {
	var d time.Duration
	if secs, err := strconv.ParseInt(h, 10, 64); err == nil && secs >= 0 {
		d = time.Duration(min(secs, int64(MaxThrottleWait/time.Second))) * time.Second
	} else if at, err := http.ParseTime(h); err == nil {
		d = at.Sub(now)
	}
	if d <= 0 {
		return DefaultThrottleWait
	}
	return min(d, MaxThrottleWait)
}
