package order_test

import (
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
