package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// withField returns validBody with one top-level field's JSON value replaced.
func withField(field, value string) string {
	return withItems(validField(field, value), `[{"sku":"SKU-1","quantity":2,"unit_price":1299}]`)
}

// validField is the top-level part of validBody with one value replaced.
func validField(field, value string) map[string]string {
	fields := map[string]string{
		"customer_id": `"cus_123"`, "currency": `"USD"`, "payment_method": `"pm_card_visa"`,
	}
	fields[field] = value
	return fields
}

func withItems(fields map[string]string, items string) string {
	return fmt.Sprintf(`{"customer_id":%s,"currency":%s,"payment_method":%s,"items":%s}`,
		fields["customer_id"], fields["currency"], fields["payment_method"], items)
}

// item is one items element with the given quantity and unit price.
func item(sku string, quantity, unitPrice int64) string {
	return fmt.Sprintf(`{"sku":%q,"quantity":%d,"unit_price":%d}`, sku, quantity, unitPrice)
}

func items(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = item(fmt.Sprintf("SKU-%d", i), 1, 100)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestMalformedRequestsGetAProblemAndWriteNothing(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	const (
		jsonType   = "application/json"
		malformed  = "urn:problem-type:checkout:malformed-order"
		invalid    = "urn:problem-type:checkout:invalid-order"
		badKey     = "urn:problem-type:checkout:invalid-idempotency-key"
		aboutBlank = "about:blank"
		emptyKey   = "(empty)"
	)
	long := strings.Repeat("x", 65)
	tests := []struct {
		name        string
		contentType string // "-" sends none
		key         string // "" sends a fresh valid key, "-" none, emptyKey an empty one
		body        string
		wantStatus  int
		wantType    string
		wantFields  []string // the 422 errors list, in order
	}{
		// Not a well-formed order document: 400.
		{name: "empty body", body: "", wantStatus: 400, wantType: malformed},
		{name: "not JSON", body: "customer_id=cus_123", wantStatus: 400, wantType: malformed},
		{name: "syntax error", body: `{"customer_id":"cus_123",}`, wantStatus: 400, wantType: malformed},
		{name: "truncated", body: validBody[:len(validBody)-2], wantStatus: 400, wantType: malformed},
		{name: "trailing data", body: validBody + `{}`, wantStatus: 400, wantType: malformed},
		{name: "trailing garbage", body: validBody + ` x`, wantStatus: 400, wantType: malformed},
		{name: "array at the top", body: "[" + validBody + "]", wantStatus: 400, wantType: malformed},
		{name: "null", body: "null", wantStatus: 400, wantType: malformed},
		{name: "string for quantity", body: withItems(validField("", ""), `[{"sku":"S","quantity":"2","unit_price":1}]`), wantStatus: 400, wantType: malformed},
		{name: "fraction for unit_price", body: withItems(validField("", ""), `[{"sku":"S","quantity":2,"unit_price":12.5}]`), wantStatus: 400, wantType: malformed},
		{name: "number for customer_id", body: withField("customer_id", "123"), wantStatus: 400, wantType: malformed},
		{name: "object for items", body: withItems(validField("", ""), `{"sku":"S"}`), wantStatus: 400, wantType: malformed},
		{name: "quantity beyond int64", body: withItems(validField("", ""), `[{"sku":"S","quantity":99999999999999999999,"unit_price":1}]`), wantStatus: 400, wantType: malformed},
		{name: "unknown field", body: strings.Replace(validBody, `{"customer_id"`, `{"coupon":"FREE","customer_id"`, 1), wantStatus: 400, wantType: malformed},
		{name: "unknown item field", body: withItems(validField("", ""), `[{"sku":"S","quantity":1,"unit_price":1,"discount":1}]`), wantStatus: 400, wantType: malformed},
		{name: "duplicated field", body: strings.Replace(validBody, `{"customer_id":"cus_123"`, `{"customer_id":"cus_123","customer_id":"cus_999"`, 1), wantStatus: 400, wantType: malformed},
		{name: "duplicated item field", body: withItems(validField("", ""), `[{"sku":"S","quantity":1,"quantity":1000,"unit_price":1}]`), wantStatus: 400, wantType: malformed},
		// encoding/json matches keys case-insensitively; the contract does not.
		{name: "field in another case", body: strings.Replace(validBody, `"customer_id"`, `"Customer_ID"`, 1), wantStatus: 400, wantType: malformed},
		{name: "duplicated field in another case", body: strings.Replace(validBody, `{"customer_id":"cus_123"`, `{"customer_id":"cus_123","CUSTOMER_ID":"cus_999"`, 1), wantStatus: 400, wantType: malformed},
		{name: "duplicated item field folded", body: withItems(validField("", ""), `[{"sku":"S","ſku":"T","quantity":1,"unit_price":1}]`), wantStatus: 400, wantType: malformed},
		{name: "nesting too deep", body: withItems(validField("", ""), strings.Repeat("[", 50)+strings.Repeat("]", 50)), wantStatus: 400, wantType: malformed},
		{name: "deep nesting in an unknown field", body: `{"x":` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000) + "}", wantStatus: 400, wantType: malformed},

		// Transport: size and media type.
		{name: "body over 1 MiB", body: `{"customer_id":"` + strings.Repeat("a", 1<<20) + `"}`, wantStatus: 413, wantType: aboutBlank},
		{name: "no Content-Type", contentType: "-", body: validBody, wantStatus: 415, wantType: aboutBlank},
		{name: "text/plain", contentType: "text/plain", body: validBody, wantStatus: 415, wantType: aboutBlank},
		{name: "form", contentType: "application/x-www-form-urlencoded", body: validBody, wantStatus: 415, wantType: aboutBlank},
		{name: "json-ish media type", contentType: "application/jsonx", body: validBody, wantStatus: 415, wantType: aboutBlank},

		// Idempotency-Key.
		{name: "missing key", key: "-", body: validBody, wantStatus: 400, wantType: badKey},
		{name: "empty key", key: emptyKey, body: validBody, wantStatus: 400, wantType: badKey},
		{name: "empty quoted key", key: `""`, body: validBody, wantStatus: 400, wantType: badKey},
		{name: "key of 256 chars", key: strings.Repeat("k", 256), body: validBody, wantStatus: 400, wantType: badKey},
		{name: "key with a space", key: "my key", body: validBody, wantStatus: 400, wantType: badKey},
		{name: "key with non-ASCII", key: "clé", body: validBody, wantStatus: 400, wantType: badKey},
		{name: "key with a tab", key: "a\tb", body: validBody, wantStatus: 400, wantType: badKey},

		// Well-formed, invalid values: 422 naming each field.
		{name: "empty customer_id", body: withField("customer_id", `""`), wantStatus: 422, wantType: invalid, wantFields: []string{"customer_id"}},
		{name: "customer_id of 65 chars", body: withField("customer_id", `"`+long+`"`), wantStatus: 422, wantType: invalid, wantFields: []string{"customer_id"}},
		{name: "payment_method of 65 chars", body: withField("payment_method", `"`+long+`"`), wantStatus: 422, wantType: invalid, wantFields: []string{"payment_method"}},
		{name: "payment_method not visible ASCII (the provider would reject it)", body: withField("payment_method", `"pm card ü"`), wantStatus: 422, wantType: invalid, wantFields: []string{"payment_method"}},
		{name: "missing payment_method", body: `{"customer_id":"c","currency":"USD","items":[{"sku":"S","quantity":1,"unit_price":1}]}`, wantStatus: 422, wantType: invalid, wantFields: []string{"payment_method"}},
		{name: "control character", body: withField("customer_id", `"cus\u0000"`), wantStatus: 422, wantType: invalid, wantFields: []string{"customer_id"}},
		// encoding/json turns these into U+FFFD and would store that.
		{name: "invalid UTF-8", body: withField("customer_id", "\"cus\xff\""), wantStatus: 400, wantType: malformed},
		{name: "lone surrogate", body: withField("customer_id", `"cus\ud800"`), wantStatus: 422, wantType: invalid, wantFields: []string{"customer_id"}},
		{name: "C1 control character", body: withField("customer_id", `"cus\u0085"`), wantStatus: 422, wantType: invalid, wantFields: []string{"customer_id"}},
		{name: "bidi override", body: withItems(validField("", ""), `[{"sku":"SKU\u202e1-","quantity":1,"unit_price":1}]`), wantStatus: 422, wantType: invalid, wantFields: []string{"items[0].sku"}},
		{name: "lowercase currency", body: withField("currency", `"usd"`), wantStatus: 422, wantType: invalid, wantFields: []string{"currency"}},
		{name: "unknown currency", body: withField("currency", `"XXX"`), wantStatus: 422, wantType: invalid, wantFields: []string{"currency"}},
		{name: "no items", body: withItems(validField("", ""), `[]`), wantStatus: 422, wantType: invalid, wantFields: []string{"items"}},
		{name: "null items", body: withItems(validField("", ""), `null`), wantStatus: 422, wantType: invalid, wantFields: []string{"items"}},
		{name: "101 items", body: withItems(validField("", ""), items(101)), wantStatus: 422, wantType: invalid, wantFields: []string{"items"}},
		{name: "sku of 65 chars", body: withItems(validField("", ""), "["+item(long, 1, 1)+"]"), wantStatus: 422, wantType: invalid, wantFields: []string{"items[0].sku"}},
		{name: "quantity 0", body: withItems(validField("", ""), "["+item("S", 0, 1)+"]"), wantStatus: 422, wantType: invalid, wantFields: []string{"items[0].quantity"}},
		{name: "quantity 1001", body: withItems(validField("", ""), "["+item("S", 1001, 1)+"]"), wantStatus: 422, wantType: invalid, wantFields: []string{"items[0].quantity"}},
		{name: "negative quantity", body: withItems(validField("", ""), "["+item("S", -1, 1)+"]"), wantStatus: 422, wantType: invalid, wantFields: []string{"items[0].quantity"}},
		{name: "unit_price 0", body: withItems(validField("", ""), "["+item("S", 1, 0)+"]"), wantStatus: 422, wantType: invalid, wantFields: []string{"items[0].unit_price"}},
		{name: "unit_price 100000001", body: withItems(validField("", ""), "["+item("S", 1, 100_000_001)+"]"), wantStatus: 422, wantType: invalid, wantFields: []string{"items[0].unit_price"}},
		{name: "huge unit_price", body: withItems(validField("", ""), "["+item("S", 1000, 1<<62)+"]"), wantStatus: 422, wantType: invalid, wantFields: []string{"items[0].unit_price"}},
		{
			name: "several invalid fields together",
			body: `{"customer_id":"","currency":"usd","payment_method":"pm",` +
				`"items":[` + item("S", 1, 1) + `,` + item("", 0, 100_000_001) + `]}`,
			wantStatus: 422, wantType: invalid,
			wantFields: []string{"customer_id", "currency", "items[1].sku", "items[1].quantity", "items[1].unit_price"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var headers []string
			switch tt.contentType {
			case "":
				headers = append(headers, "Content-Type", jsonType)
			case "-":
			default:
				headers = append(headers, "Content-Type", tt.contentType)
			}
			switch tt.key {
			case "":
				headers = append(headers, "Idempotency-Key", newKey())
			case emptyKey:
				headers = append(headers, "Idempotency-Key", "")
			case "-":
			default:
				headers = append(headers, "Idempotency-Key", tt.key)
			}
			r := b.do(t, http.MethodPost, "/orders", tt.body, headers...)
			if got, want := r.status, tt.wantStatus; got != want {
				t.Fatalf("status = %v, want %d", r, want)
			}
			p := decodeProblem(t, r)
			if got, want := p.Type, tt.wantType; got != want {
				t.Errorf("type = %q, want %q", got, want)
			}
			var fields []string
			for _, e := range p.Errors {
				fields = append(fields, e.Field)
				if e.Detail == "" {
					t.Errorf("error for %s has no detail", e.Field)
				}
			}
			if !slices.Equal(fields, tt.wantFields) {
				t.Errorf("errors name %q, want %q", fields, tt.wantFields)
			}
		})
	}
	t.Cleanup(func() {
		if orders, keys := b.rows(t); orders != 0 || keys != 0 {
			t.Errorf("after %d bad requests: %d orders, %d idempotency keys; want none", len(tests), orders, keys)
		}
	})
}

func TestContentTypeWithCharsetIsJSON(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, options{})
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON"} {
		r := b.do(t, http.MethodPost, "/orders", validBody, "Content-Type", ct, "Idempotency-Key", newKey())
		if got, want := r.status, http.StatusCreated; got != want {
			t.Errorf("Content-Type %q: %v, want %d", ct, r, want)
		}
	}
}
