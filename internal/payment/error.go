package payment

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The kinds of failure. Every error from Charge and FindCharges matches exactly one with
// errors.Is (a lookup is never ErrDeclined).
var (
	// ErrDeclined: the provider refused the payment (402). A final business outcome, not a
	// provider failure: never retry it and never count it against the circuit breaker.
	ErrDeclined = errors.New("payment declined")
	// ErrPermanent: the provider rejected the request itself (400, 422), or it could not be
	// built. Retrying cannot help; it means a bug on our side. Other 4xx answers and
	// redirects are ErrTransient (see kindOf).
	ErrPermanent = errors.New("payment request rejected")
	// ErrTransient: the provider is in trouble or unreachable (409, 429, 5xx, timeout,
	// connection error, unreadable response), or answered with a charge that is not the
	// one requested (ReceiptMismatchError). The outcome is not final: retrying with the same
	// key is safe and may succeed, and it counts as a breaker failure (except a 409 or a
	// 429, see Classify); the provider may hold a charge, which FindCharges can tell. A
	// caller's own cancellation is transient too; tell it apart with
	// errors.Is(err, context.Canceled).
	ErrTransient = errors.New("payment provider unavailable")
)

// ReceiptMismatchError is the cause (Error.Err, under ErrTransient) of a charge attempt the
// provider answered 2xx with a succeeded charge for another amount, currency or reference
// than requested: a key collision or a provider bug. The provider reports that it holds a
// charge, so the order is neither paid by it nor certainly unpaid: it
// must not be settled either way on this answer. Another attempt with the same key most
// likely replays the same answer; the charge needs looking into (FindCharges lists what the
// provider holds for the order, with its amounts).
type ReceiptMismatchError struct {
	// ChargeID is the provider's id of the charge it reported.
	ChargeID string
	// Want is what the attempt asked for; Got is what the provider reported.
	WantAmount, GotAmount       int64
	WantCurrency, GotCurrency   string
	WantReference, GotReference string
}

func (e *ReceiptMismatchError) Error() string {
	return fmt.Sprintf("provider reported charge %s for %d %s (reference %q), not the requested %d %s (reference %q)",
		e.ChargeID, e.GotAmount, e.GotCurrency, e.GotReference, e.WantAmount, e.WantCurrency, e.WantReference)
}

// Error describes a failed charge attempt or lookup.
type Error struct {
	// Kind is ErrDeclined, ErrPermanent or ErrTransient.
	Kind error
	// StatusCode is the provider's HTTP status, or 0 when no response arrived.
	StatusCode int
	// Code and Message are the provider's error type and message, when it sent them.
	Code    string
	Message string
	// Err is the underlying cause, such as a network error or context.DeadlineExceeded.
	Err error
	// RetryAfter is when the provider asked to be called again, for a 429 (see
	// RetryAfterOf); 0 otherwise.
	RetryAfter time.Duration

	lookup bool // the error of a lookup (FindCharges), not of a charge attempt
}

func (e *Error) Error() string {
	msg := e.Kind.Error()
	if e.StatusCode != 0 {
		msg += fmt.Sprintf(": status %d", e.StatusCode)
	}
	if e.Code != "" {
		msg += fmt.Sprintf(": %s: %s", e.Code, e.Message)
	}
	if e.Err != nil {
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

// IsTransient reports whether err is of kind ErrTransient: the outcome is not final, and
// another attempt with the same idempotency key is safe.
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }

// IsDeclined reports whether the provider declined the payment.
func IsDeclined(err error) bool { return errors.Is(err, ErrDeclined) }

// IsThrottled reports whether the provider answered 429: the call was over its rate limit.
// The provider refused it before processing it, so that attempt charged nothing, and it said
// when to come back (RetryAfterOf). It stays ErrTransient — the order is not charged yet, and
// an earlier attempt's outcome stays as unknown as it was — but it is no sign of trouble.
func IsThrottled(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.StatusCode == http.StatusTooManyRequests
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
	// sends none and asks for exponential backoff from about a second.
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

// newStatusError describes a non-2xx response of the given kind, with the provider's error
// type and message when the body carries them, and a 429's Retry-After.
func newStatusError(kind error, resp *http.Response, body []byte) *Error {
	e := &Error{Kind: kind, StatusCode: resp.StatusCode}
	if resp.StatusCode == http.StatusTooManyRequests {
		e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	var b struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	// The body is informative only: a status alone decides the kind.
	if json.Unmarshal(body, &b) == nil {
		e.Code, e.Message = b.Error.Type, b.Error.Message
	}
	return e
}

// kindOf classifies a charge's non-2xx status, following the protocol: 402 declines, 400 and
// 422 reject our request itself. Everything else is treated as provider trouble, including
// 401, 403, 404 and redirects: they mean a rotated key, a wrong PAYMENT_URL or a misrouting
// proxy — an outage to fix, during which orders must be deferred (and the breaker open, and
// alerts fire), not failed one by one.
func kindOf(status int) error {
	if status == http.StatusPaymentRequired {
		return ErrDeclined
	}
	return lookupKindOf(status)
}

// lookupKindOf classifies a lookup's non-2xx status the same way, except that a lookup cannot
// be declined: 400 and 422 reject our request, anything else is provider trouble.
func lookupKindOf(status int) error {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return ErrPermanent
	default:
		return ErrTransient
	}
}
