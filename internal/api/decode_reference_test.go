package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"unicode/utf8"

	"github.com/resilientcheckout/checkout/internal/order"
)

// referenceDecode is the order decoder as it was before decodePlaceRequest
// read the body in one pass: a token walk rejecting what encoding/json would
// accept (duplicated keys, keys in another case, trailing data, deep
// nesting), then encoding/json with unknown fields disallowed. It is kept as
// the oracle decodePlaceRequest must agree with: the same bodies accepted,
// the same values decoded.
func referenceDecode(body []byte) (order.PlaceRequest, bool) {
	if !utf8.Valid(body) || !referenceStructureOK(body) {
		return order.PlaceRequest{}, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req order.PlaceRequest
	if err := dec.Decode(&req); err != nil {
		return order.PlaceRequest{}, false
	}
	return req, true
}

var referenceFieldNames = []string{"customer_id", "currency", "payment_method", "items", "sku", "quantity", "unit_price"}

func referenceStructureOK(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return false
	}
	if err := referenceWalkObject(dec, 1); err != nil {
		return false
	}
	_, err = dec.Token()
	return errors.Is(err, io.EOF)
}

func referenceWalkObject(dec *json.Decoder, depth int) error {
	seen := make(map[string]struct{})
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if !slices.Contains(referenceFieldNames, key) {
			return errors.New("unknown field")
		}
		if _, dup := seen[key]; dup {
			return errors.New("duplicate")
		}
		seen[key] = struct{}{}
		if err := referenceWalkValue(dec, depth); err != nil {
			return err
		}
	}
	_, err := dec.Token()
	return err
}

func referenceWalkValue(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth+1 > 8 {
		return errors.New("too deep")
	}
	if d == '{' {
		return referenceWalkObject(dec, depth+1)
	}
	for dec.More() {
		if err := referenceWalkValue(dec, depth+1); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}
