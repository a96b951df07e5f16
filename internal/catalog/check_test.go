package catalog

import (
	"errors"
	"reflect"
	"testing"
	"testing/synctest"
)

func TestQuoteCheck(t *testing.T) {
	t.Parallel()
	q := Quote{
		Prices: map[string]Price{
			"SKU-1": {UnitPrice: 1299, Currency: "USD"},
			"SKU-2": {UnitPrice: 500, Currency: "USD"},
			"SKU-9": {UnitPrice: 100, Currency: "EUR"},
		},
		Unknown: []string{"SKU-404"},
	}
	usd := func(items ...Item) Order { return Order{Currency: "USD", Items: items} }
	tests := []struct {
		name   string
		order  Order
		kind   error      // nil: the order matches
		items  []Mismatch // the lines the error names
		prices []string   // the SKUs of the error's current prices
	}{
		{
			name:  "match",
			order: usd(Item{"SKU-1", 1299}, Item{"SKU-2", 500}, Item{"SKU-1", 1299}),
		},
		{
			name:   "changed price",
			order:  usd(Item{"SKU-1", 1299}, Item{"SKU-2", 450}),
			kind:   ErrPriceChanged,
			items:  []Mismatch{{Index: 1, SKU: "SKU-2", Reason: ReasonPrice, UnitPrice: 450, Current: Price{500, "USD"}}},
			prices: []string{"SKU-1", "SKU-2"},
		},
		{
			name:   "unknown SKU",
			order:  usd(Item{"SKU-1", 1299}, Item{"SKU-404", 100}),
			kind:   ErrUnknownSKU,
			items:  []Mismatch{{Index: 1, SKU: "SKU-404", Reason: ReasonUnknown, UnitPrice: 100}},
			prices: []string{"SKU-1"},
		},
		{
			name:   "SKU the quote does not mention",
			order:  usd(Item{"SKU-7", 100}),
			kind:   ErrUnknownSKU,
			items:  []Mismatch{{Index: 0, SKU: "SKU-7", Reason: ReasonUnknown, UnitPrice: 100}},
			prices: []string{},
		},
		{
			name:   "currency mismatch",
			order:  Order{Currency: "EUR", Items: []Item{{"SKU-1", 1299}, {"SKU-9", 100}}},
			kind:   ErrPriceChanged,
			items:  []Mismatch{{Index: 0, SKU: "SKU-1", Reason: ReasonCurrency, UnitPrice: 1299, Current: Price{1299, "USD"}}},
			prices: []string{"SKU-1", "SKU-9"},
		},
		{
			name:  "currency and price both off",
			order: Order{Currency: "EUR", Items: []Item{{"SKU-2", 499}}},
			kind:  ErrPriceChanged,
			// The currency is reported: a price in another currency is no
			// price for this order at all.
			items:  []Mismatch{{Index: 0, SKU: "SKU-2", Reason: ReasonCurrency, UnitPrice: 499, Current: Price{500, "USD"}}},
			prices: []string{"SKU-2"},
		},
		{
			name:  "unknown wins over changed",
			order: usd(Item{"SKU-2", 1}, Item{"SKU-404", 100}, Item{"SKU-405", 100}),
			kind:  ErrUnknownSKU,
			items: []Mismatch{
				{Index: 1, SKU: "SKU-404", Reason: ReasonUnknown, UnitPrice: 100},
				{Index: 2, SKU: "SKU-405", Reason: ReasonUnknown, UnitPrice: 100},
			},
			prices: []string{"SKU-2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := q.Check(tt.order)
			if tt.kind == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			var mismatch *MismatchError
			if !errors.As(err, &mismatch) || !errors.Is(err, tt.kind) {
				t.Fatalf("got %v, want a *MismatchError of kind %v", err, tt.kind)
			}
			if !reflect.DeepEqual(mismatch.Items, tt.items) {
				t.Errorf("items:\n got %+v\nwant %+v", mismatch.Items, tt.items)
			}
			var skus []string
			for _, sku := range tt.prices {
				skus = append(skus, sku)
				if mismatch.Prices[sku] != q.Prices[sku] {
					t.Errorf("current price of %s: got %v, want %v", sku, mismatch.Prices[sku], q.Prices[sku])
				}
			}
			if len(mismatch.Prices) != len(tt.prices) {
				t.Errorf("current prices: got %v, want those of %v", mismatch.Prices, skus)
			}
			for _, other := range []error{ErrUnknownSKU, ErrPriceChanged, ErrUnavailable} {
				if !errors.Is(other, tt.kind) && errors.Is(err, other) {
					t.Errorf("error also matches %v", other)
				}
			}
		})
	}
}

func TestMismatchErrorMessage(t *testing.T) {
	t.Parallel()
	q := Quote{Prices: map[string]Price{"SKU-1": {1299, "USD"}, "SKU-9": {100, "EUR"}}}
	err := q.Check(Order{Currency: "USD", Items: []Item{{"SKU-1", 1000}, {"SKU-9", 100}}})
	want := `price changed: items[0] "SKU-1": unit price 1299, not 1000; items[1] "SKU-9": priced in EUR`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// TestServiceCheck runs the check through a Service: the quote comes back
// with the verdict, so the caller can tell a verdict on stale prices.
func TestServiceCheck(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		order := Order{Currency: "USD", Items: []Item{{"SKU-1", 1299}, {"SKU-2", 500}}}
		if q, err := b.svc.Check(t.Context(), order); err != nil || q.Stale {
			t.Fatalf("matching order: got %+v, %v; want a fresh quote and nil", q, err)
		}

		b.cat.set(func(f *fakeCatalog) { f.err = errDown })
		advance(b.cfg.TTL)
		q, err := b.svc.Check(t.Context(), order)
		if err != nil || !q.Stale || q.Age != b.cfg.TTL {
			t.Errorf("catalog down: got %+v, %v; want a stale quote and nil", q, err)
		}
		order.Items[1].UnitPrice = 450
		q, err = b.svc.Check(t.Context(), order)
		var mismatch *MismatchError
		if !errors.As(err, &mismatch) || !mismatch.Stale || !q.Stale {
			t.Errorf("changed price, catalog down: got %+v, %v; want a stale *MismatchError", q, err)
		}

		order.Items = append(order.Items, Item{"SKU-3", 100})
		_, err = b.svc.Check(t.Context(), order)
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("cold SKU, catalog down: got %v, want ErrUnavailable", err)
		}
	})
}
