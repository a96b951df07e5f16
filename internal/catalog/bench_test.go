package catalog

import (
	"fmt"
	"testing"
)

// BenchmarkCheckCached is the price check's cost on an order whose SKUs
// are all fresh in the cache, the common case: no catalog request.
func BenchmarkCheckCached(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			bu := setup(b, nil)
			order := Order{Currency: "USD"}
			for i := range n {
				sku := fmt.Sprintf("SKU-%d", i)
				bu.cat.prices[sku] = Price{UnitPrice: 100, Currency: "USD"}
				order.Items = append(order.Items, Item{SKU: sku, UnitPrice: 100})
			}
			if _, err := bu.svc.Check(b.Context(), order); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bu.svc.Check(b.Context(), order); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
