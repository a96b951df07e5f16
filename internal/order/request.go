package order

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// PlaceRequest is the body of POST /orders.
type PlaceRequest struct {
	CustomerID    string `json:"customer_id"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Items         []Item `json:"items"`
}

// Limits from DESIGN.md ("Details clients and tests rely on").
const (
	maxTextLen   = 64
	maxItems     = 100
	maxQuantity  = 1000
	maxUnitPrice = 100_000_000
	// maxDepth allows the order document's own nesting (object → items array
	// → item object) with room to spare, and stops pathological inputs.
	maxDepth = 8
)

// Currencies are the ISO 4217 codes the shop accepts.
var Currencies = []string{"AUD", "CAD", "CHF", "EUR", "GBP", "JPY", "SEK", "USD", "VND"}

// ErrMalformed is returned by DecodePlaceRequest when the body is not a
// well-formed order document (400), as opposed to one with invalid values
// (422, see ValidationError).
var ErrMalformed = errors.New("malformed order document")

// DecodePlaceRequest parses an order document strictly: one JSON object,
// known fields only, each at most once, with the right JSON types and no
// trailing data. encoding/json silently accepts duplicated fields (the last
// wins), which would let a proxy and this service read different orders from
// one body, so a token pass rejects them first.
func DecodePlaceRequest(body []byte) (PlaceRequest, error) {
	if err := checkStructure(body); err != nil {
		return PlaceRequest{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req PlaceRequest
	if err := dec.Decode(&req); err != nil {
		return PlaceRequest{}, fmt.Errorf("%w: %s", ErrMalformed, describeDecodeError(err))
	}
	return req, nil
}

// fieldNames are the order document's keys, at any level. encoding/json
// matches keys case-insensitively (and folds "ſ" to "s", "K" to "k"), so
// {"customer_id":"a","CUSTOMER_ID":"b"} would decode as "b" despite the
// duplicate check; only these exact spellings are accepted. A known name at
// the wrong level is left to the decoder, which rejects it as unknown.
var fieldNames = []string{"customer_id", "currency", "payment_method", "items", "sku", "quantity", "unit_price"}

// checkStructure walks the tokens once: a single top-level object, only
// exactly spelled field names, no duplicated keys at any level, bounded
// depth, nothing after the value.
func checkStructure(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return errors.New("body is not JSON")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("body must be a JSON object")
	}
	if err := walkObject(dec, 1); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// walkObject consumes an object whose '{' was just read.
func walkObject(dec *json.Decoder, depth int) error {
	seen := make(map[string]struct{})
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errors.New("body is not valid JSON")
		}
		key, _ := tok.(string)
		if !slices.Contains(fieldNames, key) {
			return fmt.Errorf("unknown field %q", truncate(key))
		}
		if _, dup := seen[key]; dup {
			return fmt.Errorf("field %q appears more than once", truncate(key))
		}
		seen[key] = struct{}{}
		if err := walkValue(dec, depth); err != nil {
			return err
		}
	}
	return closeDelim(dec)
}

func walkValue(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return errors.New("body is not valid JSON")
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	if depth+1 > maxDepth {
		return fmt.Errorf("JSON nested deeper than %d levels", maxDepth)
	}
	if d == '{' {
		return walkObject(dec, depth+1)
	}
	for dec.More() { // d == '['
		if err := walkValue(dec, depth+1); err != nil {
			return err
		}
	}
	return closeDelim(dec)
}

func closeDelim(dec *json.Decoder) error {
	if _, err := dec.Token(); err != nil {
		return errors.New("body is not valid JSON")
	}
	return nil
}

// describeDecodeError turns encoding/json's errors into messages that name
// the field but do not echo Go type names.
func describeDecodeError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("field %q has the wrong JSON type (got %s)", truncate(typeErr.Field), typeErr.Value)
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + msg
	}
	return "body is not a valid order document"
}

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

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// truncate keeps an echoed client value short: error details must not
// become a way to reflect a megabyte back.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return strings.ToValidUTF8(s[:limit], "") + "…"
}
