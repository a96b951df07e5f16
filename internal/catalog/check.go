package catalog

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The kinds of failed price check. Every error [Service.Check] returns for
// a reason other than a bug matches exactly one with errors.Is; the HTTP
// layer maps them: ErrUnknownSKU → 422 naming the items, ErrPriceChanged →
// 409 price-changed listing the current prices, ErrUnavailable → 503 with
// Retry-After.
var (
	// ErrUnknownSKU: an item's SKU is not in the catalog. The order is
	// invalid; no price would make it valid.
	ErrUnknownSKU = errors.New("unknown SKU")
	// ErrPriceChanged: an item's unit price or the order's currency differs
	// from the catalog's. The client should show the current prices and
	// place the order again, with a new Idempotency-Key.
	ErrPriceChanged = errors.New("price changed")
	// ErrUnavailable: some SKU has no answer young enough to use, and the
	// catalog cannot be asked now.
	ErrUnavailable = errors.New("catalog unavailable")
)

// Reason says how one item disagrees with the catalog.
type Reason uint8

const (
	// ReasonUnknown: the SKU is not in the catalog.
	ReasonUnknown Reason = iota + 1
	// ReasonPrice: the catalog's unit price is another.
	ReasonPrice
	// ReasonCurrency: the catalog prices the SKU in another currency than
	// the order's.
	ReasonCurrency
)

func (r Reason) String() string {
	switch r {
	case ReasonUnknown:
		return "unknown"
	case ReasonPrice:
		return "price"
	case ReasonCurrency:
		return "currency"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Mismatch is one item that disagrees with the catalog.
type Mismatch struct {
	// Index is the item's position in Order.Items, for "items[i].sku".
	Index  int
	SKU    string
	Reason Reason
	// UnitPrice is the price the order carries.
	UnitPrice int64
	// Current is the catalog's price; zero for ReasonUnknown.
	Current Price
}

// MismatchError is an order that disagrees with the catalog. Kind is
// ErrUnknownSKU when any SKU is unknown (Items then lists only those: an
// order that names a missing product is invalid whatever its prices), and
// ErrPriceChanged otherwise.
type MismatchError struct {
	Kind  error
	Items []Mismatch
	// Prices holds the catalog's current price of every known SKU of the
	// order, changed or not, so a client can show the whole cart again.
	Prices map[string]Price
	// Stale and Age are the quote's: the verdict may rest on a cached
	// answer kept while the catalog was unavailable.
	Stale bool
	Age   time.Duration
}

func (e *MismatchError) Error() string {
	parts := make([]string, len(e.Items))
	for i, m := range e.Items {
		switch m.Reason {
		case ReasonUnknown:
			parts[i] = fmt.Sprintf("items[%d] %q: not in the catalog", m.Index, m.SKU)
		case ReasonCurrency:
			parts[i] = fmt.Sprintf("items[%d] %q: priced in %s", m.Index, m.SKU, m.Current.Currency)
		default:
			parts[i] = fmt.Sprintf("items[%d] %q: unit price %d, not %d", m.Index, m.SKU, m.Current.UnitPrice, m.UnitPrice)
		}
	}
	return e.Kind.Error() + ": " + strings.Join(parts, "; ")
}

// Unwrap exposes the kind to errors.Is.
func (e *MismatchError) Unwrap() error { return e.Kind }

// UnavailableError is a lookup that could not be answered: the catalog is
// unavailable and the cache holds no answer young enough for SKUs.
type UnavailableError struct {
	// SKUs are the requested SKUs without a usable answer, sorted.
	SKUs []string
	// RetryAfter is when to try again: what is left of the breaker's open
	// state, or DefaultRetryAfter when it is not open.
	RetryAfter time.Duration
	// Err is why the catalog could not be asked (resilience.ErrOpen, a
	// timeout, a 503…).
	Err error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v: no price younger than the staleness bound for %s: %v",
		ErrUnavailable, strings.Join(e.SKUs, ", "), e.Err)
}

// Unwrap exposes the kind and the cause to errors.Is and errors.As.
func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// Check compares o with the quote and returns nil when every item's SKU is
// priced at its unit price in the order's currency, or a *MismatchError. A
// SKU the quote does not mention counts as unknown, so a quote for the
// wrong SKUs can never let an item through.
func (q Quote) Check(o Order) error {
	var unknown, changed []Mismatch
	for i, it := range o.Items {
		p, ok := q.Prices[it.SKU]
		m := Mismatch{Index: i, SKU: it.SKU, UnitPrice: it.UnitPrice, Current: p}
		switch {
		case !ok:
			m.Reason = ReasonUnknown
			unknown = append(unknown, m)
		case p.Currency != o.Currency:
			m.Reason = ReasonCurrency
			changed = append(changed, m)
		case p.UnitPrice != it.UnitPrice:
			m.Reason = ReasonPrice
			changed = append(changed, m)
		}
	}
	if len(unknown) == 0 && len(changed) == 0 {
		return nil
	}
	e := &MismatchError{Kind: ErrPriceChanged, Items: changed, Stale: q.Stale, Age: q.Age}
	if len(unknown) > 0 {
		e.Kind, e.Items = ErrUnknownSKU, unknown
	}
	e.Prices = make(map[string]Price, len(o.Items))
	for _, it := range o.Items {
		if p, ok := q.Prices[it.SKU]; ok {
			e.Prices[it.SKU] = p
		}
	}
	return e
}
