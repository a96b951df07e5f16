package order_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/order"
)

func TestTotal(t *testing.T) {
	t.Parallel()
	const maxInt = math.MaxInt64
	tests := []struct {
		name   string
		items  []order.Item
		want   int64
		wantOK bool
	}{
		{"empty", nil, 0, true},
		{"one line", []order.Item{{Quantity: 2, UnitPrice: 1299}}, 2598, true},
		{"sum of lines", []order.Item{{Quantity: 2, UnitPrice: 1299}, {Quantity: 1, UnitPrice: 500}}, 3098, true},
		{"largest valid order", slices.Repeat([]order.Item{{Quantity: 1000, UnitPrice: 100_000_000}}, 100), 10_000_000_000_000, true},
		{"exactly MaxInt64", []order.Item{{Quantity: 1, UnitPrice: maxInt}}, maxInt, true},
		{"line overflows", []order.Item{{Quantity: 2, UnitPrice: maxInt/2 + 1}}, 0, false},
		{"huge quantity times price", []order.Item{{Quantity: maxInt, UnitPrice: maxInt}}, 0, false},
		{"sum overflows", []order.Item{{Quantity: 1, UnitPrice: maxInt}, {Quantity: 1, UnitPrice: 1}}, 0, false},
		{"sum of halves overflows", []order.Item{{Quantity: 1, UnitPrice: maxInt/2 + 1}, {Quantity: 1, UnitPrice: maxInt/2 + 1}}, 0, false},
		{"negative quantity", []order.Item{{Quantity: -1, UnitPrice: 1}}, 0, false},
		{"negative price", []order.Item{{Quantity: 1, UnitPrice: -1}}, 0, false},
		{"MinInt64 times -1", []order.Item{{Quantity: -1, UnitPrice: math.MinInt64}}, 0, false},
		{"zero quantity", []order.Item{{Quantity: 0, UnitPrice: maxInt}}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := order.Total(tt.items)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Total = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

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
			req, err := order.DecodePlaceRequest([]byte(tt.body))
			if !errors.Is(err, order.ErrMalformed) {
				t.Errorf("DecodePlaceRequest(%s) = %+v, %v; want ErrMalformed", tt.body, req, err)
			}
		})
	}
	if _, err := order.DecodePlaceRequest([]byte(valid)); err != nil {
		t.Errorf("DecodePlaceRequest(valid) = %v", err)
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	t.Parallel()
	req := order.PlaceRequest{
		CustomerID: strings.Repeat("é", 65), Currency: "usd", PaymentMethod: "",
		Items: []order.Item{{SKU: "ok", Quantity: 1, UnitPrice: 1}, {SKU: "bad\x7f", Quantity: 1001, UnitPrice: 0}},
	}
	_, err := req.Validate()
	var verr *order.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Validate = %v, want *ValidationError", err)
	}
	var got []string
	for _, f := range verr.Fields {
		got = append(got, f.Field)
	}
	want := []string{"customer_id", "payment_method", "currency", "items[1].sku", "items[1].quantity", "items[1].unit_price"}
	if !slices.Equal(got, want) {
		t.Errorf("fields = %q, want %q", got, want)
	}

	// 64 characters are fine even when they take more bytes.
	req = order.PlaceRequest{CustomerID: strings.Repeat("é", 64), Currency: "VND", PaymentMethod: "p",
		Items: []order.Item{{SKU: "s", Quantity: 1000, UnitPrice: 100_000_000}}}
	if total, err := req.Validate(); err != nil || total != 100_000_000_000 {
		t.Errorf("Validate(limits) = %d, %v; want 100000000000, nil", total, err)
	}
}

func TestFingerprintIgnoresFormattingOnly(t *testing.T) {
	t.Parallel()
	a := `{"customer_id":"c","currency":"USD","payment_method":"p","items":[{"sku":"s","quantity":1,"unit_price":1}]}`
	b := "{ \"items\" : [ {\"unit_price\":1, \"quantity\":1, \"sku\":\"s\"} ],\n \"payment_method\":\"p\", \"currency\":\"USD\", \"customer_id\":\"\\u0063\" }"
	c := strings.Replace(a, `"quantity":1`, `"quantity":2`, 1)
	fp := func(body string) []byte {
		req, err := order.DecodePlaceRequest([]byte(body))
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
// on arbitrary bodies: no panic; a document that decodes and validates has
// a positive total equal to the sum of its lines, within the limits; and
// re-encoding it yields a document that decodes to the same fingerprint.
func FuzzDecodePlaceRequest(f *testing.F) {
	// More seeds, the tricky shapes, are in testdata/fuzz/FuzzDecodePlaceRequest.
	f.Add([]byte(`{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-1","quantity":2,"unit_price":1299}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := order.DecodePlaceRequest(body)
		if err != nil {
			if !errors.Is(err, order.ErrMalformed) {
				t.Fatalf("decode error %v is not ErrMalformed", err)
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
		req2, err := order.DecodePlaceRequest(again)
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
