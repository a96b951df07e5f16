package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/order"
)

func TestDecodeRejectsWhatEncodingJSONAccepts(t *testing.T) {
	t.Parallel()
	const valid = `{"customer_id":"c","currency":"USD","payment_method":"p","items":[{"sku":"s","quantity":1,"unit_price":1}]}`
	tests := []struct{ name, body string }{
		{"duplicate", strings.Replace(valid, `"currency":"USD"`, `"currency":"USD","currency":"EUR"`, 1)},
		{"escaped duplicate", strings.Replace(valid, `"currency":"USD"`, `"currency":"USD","\u0063urrency":"EUR"`, 1)},
		{"other case", strings.Replace(valid, `"currency"`, `"Currency"`, 1)},
		{"duplicate in other case", strings.Replace(valid, `"currency":"USD"`, `"currency":"USD","CURRENCY":"EUR"`, 1)},
		{"Kelvin sign folds to k", strings.Replace(valid, `"sku":"s"`, `"sku":"s","s\u212au":"t"`, 1)},
		{"long s folds to s", strings.Replace(valid, `"sku":"s"`, `"sku":"s","\u017fku":"t"`, 1)},
		{"trailing object", valid + "{}"},
		{"item field at the top", strings.Replace(valid, `{"customer_id"`, `{"sku":"x","customer_id"`, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := decodePlaceRequest([]byte(tt.body))
			if !errors.Is(err, errMalformed) {
				t.Errorf("decodePlaceRequest(%s) = %+v, %v; want errMalformed", tt.body, req, err)
			}
		})
	}
	if _, err := decodePlaceRequest([]byte(valid)); err != nil {
		t.Errorf("decodePlaceRequest(valid) = %v", err)
	}
}

// TestDecodeAgreesWithEncodingJSON holds the one-pass decoder to the verdicts
// and values of the two-pass one it replaced (referenceDecode): the shapes
// where a hand-written reader could slip — escapes, numbers, null, nesting,
// whitespace, truncation at every byte of a valid document.
func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	const valid = `{"customer_id":"c","currency":"USD","payment_method":"p","items":[{"sku":"s","quantity":1,"unit_price":1}]}`
	withQuantity := func(v string) string { return strings.Replace(valid, `"quantity":1`, `"quantity":`+v, 1) }
	withCustomer := func(v string) string { return strings.Replace(valid, `"customer_id":"c"`, `"customer_id":`+v, 1) }
	bodies := []string{
		valid, " \t\r\n" + valid + " \n", "{}", "{ }", `{"items":[]}`, `{"items":null}`, `{"items":[null]}`, `{"items":[{}]}`,
		"", " ", "null", "[]", "1", `"x"`, "{", "}", `{"customer_id"}`, `{"customer_id":}`, `{,}`, `{"items":[,]}`,
		`{"items":[{"sku":"s"},]}`, `{"customer_id":"c",}`, `{"customer_id":"c" "currency":"USD"}`, `{'customer_id':"c"}`,
		"\ufeff" + valid, valid + "\x00", valid + "}", valid + " x", "\f" + valid, valid + "\v", "\u00a0" + valid,
		strings.Replace(valid, `:"c"`, ":\f\"c\"", 1), strings.Replace(valid, `,"items"`, "\u2028,\"items\"", 1),
		withQuantity("0"), withQuantity("-0"), withQuantity("-1"), withQuantity("01"), withQuantity("1.0"), withQuantity("1e2"),
		withQuantity("1E+2"), withQuantity("-"), withQuantity("1."), withQuantity(".5"), withQuantity("+1"), withQuantity("9223372036854775807"),
		withQuantity("9223372036854775808"), withQuantity("-9223372036854775808"), withQuantity("-9223372036854775809"),
		withQuantity("null"), withQuantity("nul"), withQuantity("true"), withQuantity(`"1"`), withQuantity("[1]"), withQuantity("{}"),
		withCustomer(`null`), withCustomer(`""`), withCustomer(`"\u0063"`), withCustomer(`"\ud800"`), withCustomer(`"\ud83d\ude00"`),
		withCustomer(`"a\"b"`), withCustomer(`"a\\"`), withCustomer(`"a\/b"`), withCustomer(`"\x41"`), withCustomer(`"\u00"`),
		withCustomer(`"a` + "\t" + `b"`), withCustomer(`"a` + "\u0085" + `b"`), withCustomer(`"\u0000"`), withCustomer(`"unterminated`),
		withCustomer(`"ends in a backslash\`), withCustomer("1"), withCustomer("false"), withCustomer("[]"), withCustomer("{}"),
		strings.Replace(valid, `"currency"`, `"\u0063urrency"`, 1), strings.Replace(valid, `"currency"`, `"currenc\u0079"`, 1),
		strings.Replace(valid, `"sku":"s"`, `"sku":"s","sku":"t"`, 1), strings.Replace(valid, `"sku":"s"`, `"SKU":"s"`, 1),
		strings.Replace(valid, `"items":[`, `"items":[[`, 1), strings.Replace(valid, `{"sku"`, `{"x":{"y":1},"sku"`, 1),
		strings.Replace(valid, `]}`, `,{"sku":"t","quantity":2,"unit_price":3}]}`, 1),
	}
	for i := range len(valid) {
		bodies = append(bodies, valid[:i])
	}
	for _, body := range bodies {
		want, wantOK := referenceDecode([]byte(body))
		got, err := decodePlaceRequest([]byte(body))
		if err != nil && !errors.Is(err, errMalformed) {
			t.Errorf("decodePlaceRequest(%q) = %v, not errMalformed", body, err)
		}
		if (err == nil) != wantOK || !reflect.DeepEqual(got, want) {
			t.Errorf("decodePlaceRequest(%q) = %#v, %v\nencoding/json's two passes: %#v, accepted %v", body, got, err, want, wantOK)
		}
	}
}

func TestFingerprintIgnoresFormattingOnly(t *testing.T) {
	t.Parallel()
	a := `{"customer_id":"c","currency":"USD","payment_method":"p","items":[{"sku":"s","quantity":1,"unit_price":1}]}`
	b := "{ \"items\" : [ {\"unit_price\":1, \"quantity\":1, \"sku\":\"s\"} ],\n \"payment_method\":\"p\", \"currency\":\"USD\", \"customer_id\":\"\\u0063\" }"
	c := strings.Replace(a, `"quantity":1`, `"quantity":2`, 1)
	fp := func(body string) []byte {
		req, err := decodePlaceRequest([]byte(body))
		if err != nil {
			t.Fatalf("decode %s: %v", body, err)
		}
		return req.Fingerprint()
	}
	if !bytes.Equal(fp(a), fp(b)) {
		t.Errorf("reformatted document has another fingerprint")
	}
	if bytes.Equal(fp(a), fp(c)) {
		t.Errorf("changed quantity kept the fingerprint")
	}
}

// FuzzDecodePlaceRequest holds the decoder and validator to their promises
// on arbitrary bodies: no panic; the same verdict and values as the two-pass
// encoding/json decoder it replaced (referenceDecode); a document that
// decodes and validates has a positive total equal to the sum of its lines,
// within the limits; and re-encoding it yields a document that decodes to
// the same fingerprint.
func FuzzDecodePlaceRequest(f *testing.F) {
	// More seeds, the tricky shapes, are in testdata/fuzz/FuzzDecodePlaceRequest.
	f.Add([]byte(`{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-1","quantity":2,"unit_price":1299}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodePlaceRequest(body)
		if want, ok := referenceDecode(body); (err == nil) != ok || !reflect.DeepEqual(req, want) {
			t.Fatalf("decodePlaceRequest(%q) = %#v, %v\nencoding/json's two passes: %#v, accepted %v", body, req, err, want, ok)
		}
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("decode error %v is not errMalformed", err)
			}
			return
		}
		total, err := req.Validate()
		if err != nil {
			var verr *order.ValidationError
			if !errors.As(err, &verr) || len(verr.Fields) == 0 {
				t.Fatalf("Validate = %v, want a *ValidationError naming fields", err)
			}
			return
		}
		var sum int64
		for _, it := range req.Items {
			sum += it.Quantity * it.UnitPrice // within the limits this cannot overflow
		}
		if total <= 0 || total != sum || total > 100*1000*100_000_000 {
			t.Fatalf("total %d, sum of lines %d: want equal, positive and within the limits", total, sum)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		req2, err := decodePlaceRequest(again)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", again, err)
		}
		if !bytes.Equal(req.Fingerprint(), req2.Fingerprint()) {
			t.Fatalf("fingerprint changed after re-encoding:\n%s\n%s", body, again)
		}
		if _, err := req2.Validate(); err != nil {
			t.Fatalf("re-encoded request no longer validates: %v", err)
		}
	})
}

// BenchmarkDecodePlaceRequest compares the one-pass decoder with the
// two-pass one it replaced, on the throughput run's order document.
func BenchmarkDecodePlaceRequest(b *testing.B) {
	body := []byte(`{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-1","quantity":2,"unit_price":1299},{"sku":"SKU-2","quantity":1,"unit_price":500}]}`)
	b.Run("one pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodePlaceRequest(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json, two passes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := referenceDecode(body); !ok {
				b.Fatal("rejected")
			}
		}
	})
}
