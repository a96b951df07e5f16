package order

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// PlaceRequest is what a customer asks for when placing an order (the body
// of POST /orders, decoded by internal/api).
type PlaceRequest struct {
	CustomerID    string `json:"customer_id"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Items         []Item `json:"items"`
}

// Limits from docs/design.md, "Checkout API".
const (
	maxTextLen   = 64
	maxItems     = 100
	maxQuantity  = 1000
	maxUnitPrice = 100_000_000
)

// Currencies are the ISO 4217 codes the shop accepts.
var Currencies = []string{"AUD", "CAD", "CHF", "EUR", "GBP", "JPY", "SEK", "USD", "VND"}

// FieldError is one invalid field, in the 422 problem's errors list.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// ValidationError lists every invalid field of a request (422).
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Detail
	}
	return "invalid order: " + strings.Join(parts, "; ")
}

// Validate checks every value against the limits and returns the order's
// total, or a *ValidationError naming each invalid field.
func (r PlaceRequest) Validate() (total int64, err error) {
	var v validator
	v.text("customer_id", r.CustomerID)
	v.token("payment_method", r.PaymentMethod)
	if !slices.Contains(Currencies, r.Currency) {
		v.add("currency", "must be one of "+strings.Join(Currencies, ", "))
	}
	if n := len(r.Items); n < 1 || n > maxItems {
		v.add("items", fmt.Sprintf("must hold 1 to %d items", maxItems))
	}
	for i, it := range r.Items {
		field := fmt.Sprintf("items[%d].", i)
		v.text(field+"sku", it.SKU)
		v.between(field+"quantity", it.Quantity, 1, maxQuantity)
		v.between(field+"unit_price", it.UnitPrice, 1, maxUnitPrice)
	}
	if len(v.errs) > 0 {
		return 0, &ValidationError{Fields: v.errs}
	}
	total, ok := Total(r.Items)
	if !ok {
		return 0, &ValidationError{Fields: []FieldError{{Field: "items", Detail: "total amount is too large"}}}
	}
	return total, nil
}

// Total sums quantity × unit price, reporting false on int64 overflow. The
// limits make overflow impossible today (100 × 1000 × 10^8 = 10^13), but the
// limits may change and money must never wrap around silently.
func Total(items []Item) (int64, bool) {
	var total int64
	for _, it := range items {
		if it.Quantity < 0 || it.UnitPrice < 0 || (it.Quantity != 0 && it.UnitPrice > math.MaxInt64/it.Quantity) {
			return 0, false
		}
		line := it.Quantity * it.UnitPrice
		if total > math.MaxInt64-line {
			return 0, false
		}
		total += line
	}
	return total, true
}

// Fingerprint identifies the request's content for the idempotency check: a
// SHA-256 of its canonical JSON, so formatting differences (whitespace, key
// order) do not count as a different request but any value change does.
func (r PlaceRequest) Fingerprint() []byte {
	b, _ := json.Marshal(r) // cannot fail: strings and integers only
	sum := sha256.Sum256(b)
	return sum[:]
}

type validator struct{ errs []FieldError }

func (v *validator) add(field, detail string) {
	v.errs = append(v.errs, FieldError{Field: field, Detail: detail})
}

func (v *validator) text(field, s string) {
	n := utf8.RuneCountInString(s)
	switch {
	case n == 0:
		v.add(field, "is required")
	case n > maxTextLen:
		v.add(field, fmt.Sprintf("must be at most %d characters", maxTextLen))
	case !utf8.ValidString(s) || strings.ContainsFunc(s, isControl):
		v.add(field, "must be printable text")
	}
}

// token checks an opaque identifier handed to the payment provider, which
// accepts 1–64 visible ASCII characters: anything else must be our 422, not
// a provider rejection that fails the order.
func (v *validator) token(field, s string) {
	switch {
	case s == "":
		v.add(field, "is required")
	case len(s) > maxTextLen || strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e }):
		v.add(field, fmt.Sprintf("must be 1 to %d visible ASCII characters", maxTextLen))
	}
}

func (v *validator) between(field string, n, lo, hi int64) {
	if n < lo || n > hi {
		v.add(field, fmt.Sprintf("must be from %d to %d", lo, hi))
	}
}

// isControl rejects what is not printable text: C0 and C1 control
// characters, U+FFFD (what a decoder makes of invalid UTF-8 or of a lone
// surrogate such as "\ud800"), and the invisible bidirectional controls
// that make a string display differently from what it holds (the "Trojan
// Source" characters, CVE-2021-42574).
func isControl(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f, r == utf8.RuneError:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
