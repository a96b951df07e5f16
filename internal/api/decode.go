package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/resilientcheckout/checkout/internal/order"
)

// errMalformed is returned by decodePlaceRequest when the body is not a
// well-formed order document (400), as opposed to one with invalid values
// (422, see ValidationError).
var errMalformed = errors.New("malformed order document")

// decodePlaceRequest parses an order document strictly, in one pass over the
// body: one JSON object of exactly the document's shape — known fields only,
// spelled exactly, each at most once, with the right JSON types, integers
// that fit int64 — and nothing after it. null stands for an absent value, as
// it does for encoding/json.
//
// encoding/json alone would not do: it lets the last of duplicated fields
// win, which would let a proxy and this service read different orders from
// one body, and it matches keys case-insensitively (folding "ſ" to "s" and
// "K" to "k"), so {"customer_id":"a","CUSTOMER_ID":"b"} would decode as "b".
// A token pass to catch those followed by encoding/json's own pass cost ~10 %
// of checkout's CPU under load (pprof); this reads the document once.
// TestDecodeAgreesWithEncodingJSON and FuzzDecodePlaceRequest hold it to the
// two-pass decoder's verdicts and values.
func decodePlaceRequest(body []byte) (order.PlaceRequest, error) {
	// encoding/json would replace invalid UTF-8 with U+FFFD and store it.
	if !utf8.Valid(body) {
		return order.PlaceRequest{}, fmt.Errorf("%w: body is not valid UTF-8", errMalformed)
	}
	d := docDecoder{buf: body}
	req, err := d.document()
	if err != nil {
		return order.PlaceRequest{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	return req, nil
}

// errSyntax: the body is not JSON text from some point on.
var errSyntax = errors.New("body is not valid JSON")

// docDecoder reads an order document from buf; pos is the next byte to read.
type docDecoder struct {
	buf []byte
	pos int
}

func (d *docDecoder) document() (order.PlaceRequest, error) {
	var req order.PlaceRequest
	d.space()
	if d.peek() != '{' {
		if json.Valid(d.buf) {
			return req, errors.New("body must be a JSON object")
		}
		return req, errors.New("body is not JSON")
	}
	err := d.object(func(key string) error {
		switch key {
		case "customer_id":
			return d.text(key, &req.CustomerID)
		case "currency":
			return d.text(key, &req.Currency)
		case "payment_method":
			return d.text(key, &req.PaymentMethod)
		case "items":
			return d.items(&req.Items)
		}
		return unknownField(key)
	})
	if err != nil {
		return order.PlaceRequest{}, err
	}
	d.space()
	if d.pos < len(d.buf) {
		return order.PlaceRequest{}, errors.New("unexpected data after the JSON object")
	}
	return req, nil
}

// items reads the items array, or null (no items). An empty array is an
// empty, non-nil slice, as encoding/json makes it: the fingerprint (its JSON)
// tells the two apart.
func (d *docDecoder) items(dst *[]order.Item) error {
	switch d.peek() {
	case 'n':
		return d.null()
	case '[':
		d.pos++
	default:
		return d.wrongType("items")
	}
	items := []order.Item{}
	d.space()
	if d.consume(']') {
		*dst = items
		return nil
	}
	for i := 0; ; i++ {
		d.space()
		var it order.Item
		if err := d.item(&it); err != nil {
			return fmt.Errorf("items[%d]: %w", i, err)
		}
		items = append(items, it)
		d.space()
		switch {
		case d.consume(','):
		case d.consume(']'):
			*dst = items
			return nil
		default:
			return errSyntax
		}
	}
}

// item reads one element of items: an object, or null (a zero item, which
// fails validation).
func (d *docDecoder) item(it *order.Item) error {
	switch d.peek() {
	case 'n':
		return d.null()
	case '{':
	default:
		return d.wrongType("item")
	}
	return d.object(func(key string) error {
		switch key {
		case "sku":
			return d.text(key, &it.SKU)
		case "quantity":
			return d.integer(key, &it.Quantity)
		case "unit_price":
			return d.integer(key, &it.UnitPrice)
		}
		return unknownField(key)
	})
}

// object reads the object at pos member by member: member(key) reads the
// value. Keys are compared exactly as unescaped; a key that appears twice
// is an error.
func (d *docDecoder) object(member func(key string) error) error {
	d.pos++ // '{'
	// The document's objects have at most 4 fields: no allocation.
	var seenKeys [4]string
	seen := seenKeys[:0]
	d.space()
	if d.consume('}') {
		return nil
	}
	for {
		d.space()
		if d.peek() != '"' {
			return errSyntax
		}
		key, err := d.string()
		if err != nil {
			return err
		}
		if slices.Contains(seen, key) {
			return fmt.Errorf("field %q appears more than once", truncate(key))
		}
		seen = append(seen, key)
		d.space()
		if !d.consume(':') {
			return errSyntax
		}
		d.space()
		if err := member(key); err != nil {
			return err
		}
		d.space()
		switch {
		case d.consume(','):
		case d.consume('}'):
			return nil
		default:
			return errSyntax
		}
	}
}

// text reads a string value into dst, or null (dst stays empty).
func (d *docDecoder) text(field string, dst *string) error {
	switch d.peek() {
	case 'n':
		return d.null()
	case '"':
		s, err := d.string()
		*dst = s
		return err
	}
	return d.wrongType(field)
}

// string reads the JSON string at pos. Without escapes it is the bytes
// between the quotes (the body is valid UTF-8); with escapes, encoding/json
// unescapes it — so "\u0063urrency" is "currency", and a lone surrogate
// becomes U+FFFD, which validation rejects.
func (d *docDecoder) string() (string, error) {
	start := d.pos
	escaped := false
	for d.pos++; d.pos < len(d.buf); d.pos++ {
		switch c := d.buf[d.pos]; {
		case c == '"':
			d.pos++
			raw := d.buf[start:d.pos]
			if !escaped {
				return string(raw[1 : len(raw)-1]), nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", errSyntax
			}
			return s, nil
		case c == '\\':
			escaped = true
			d.pos++ // the escaped byte cannot end the string; json.Unmarshal checks the escape
		case c < 0x20:
			return "", errSyntax // control characters must be escaped
		}
	}
	return "", errSyntax // unterminated
}

// integer reads a JSON number that is an integer within int64 into dst, or
// null (dst stays 0). A fraction or an exponent is the wrong type, as it is
// for encoding/json decoding into an int64.
func (d *docDecoder) integer(field string, dst *int64) error {
	switch c := d.peek(); {
	case c == 'n':
		return d.null()
	case c != '-' && !isDigit(c):
		return d.wrongType(field)
	}
	start := d.pos
	integral, err := d.number()
	if err != nil {
		return err
	}
	if !integral {
		return fmt.Errorf("field %q has the wrong JSON type (got a number with a fraction or exponent)", field)
	}
	n, err := strconv.ParseInt(string(d.buf[start:d.pos]), 10, 64)
	if err != nil {
		return fmt.Errorf("field %q has the wrong JSON type (got a number beyond int64)", field)
	}
	*dst = n
	return nil
}

// number reads a JSON number (RFC 8259, section 6) and reports whether it
// had neither a fraction nor an exponent.
func (d *docDecoder) number() (integral bool, err error) {
	d.consume('-')
	if !d.consume('0') && d.digits() == 0 {
		return false, errSyntax
	}
	integral = true
	if d.consume('.') {
		integral = false
		if d.digits() == 0 {
			return false, errSyntax
		}
	}
	if d.consume('e') || d.consume('E') {
		integral = false
		if !d.consume('+') {
			d.consume('-')
		}
		if d.digits() == 0 {
			return false, errSyntax
		}
	}
	return integral, nil
}

func (d *docDecoder) digits() int {
	start := d.pos
	for d.pos < len(d.buf) && isDigit(d.buf[d.pos]) {
		d.pos++
	}
	return d.pos - start
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (d *docDecoder) null() error {
	if !bytes.HasPrefix(d.buf[d.pos:], []byte("null")) {
		return errSyntax
	}
	d.pos += 4
	return nil
}

// wrongType is the error for a value at pos of another type than field's.
func (d *docDecoder) wrongType(field string) error {
	var got string
	switch c := d.peek(); {
	case c == '"':
		got = "string"
	case c == '{':
		got = "object"
	case c == '[':
		got = "array"
	case c == 't' || c == 'f':
		got = "boolean"
	case c == '-' || isDigit(c):
		got = "number"
	default:
		return errSyntax
	}
	return fmt.Errorf("field %q has the wrong JSON type (got %s)", field, got)
}

func unknownField(key string) error {
	return fmt.Errorf("unknown field %q", truncate(key))
}

// peek returns the byte at pos, 0 at the end.
func (d *docDecoder) peek() byte {
	if d.pos < len(d.buf) {
		return d.buf[d.pos]
	}
	return 0
}

// consume reads c if it is next.
func (d *docDecoder) consume(c byte) bool {
	if d.pos < len(d.buf) && d.buf[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

// space skips JSON whitespace.
func (d *docDecoder) space() {
	for d.pos < len(d.buf) {
		switch d.buf[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// truncate keeps an echoed client value short: error details must not
// become a way to reflect a megabyte back.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return strings.ToValidUTF8(s[:limit], "") + "…"
}
