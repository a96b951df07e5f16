package catalog_test

import (
	"errors"
	"fmt"

	"github.com/resilientcheckout/checkout/internal/catalog"
)

// A quote checks an order; the error's kind decides the answer and its
// items say which lines to name.
func ExampleQuote_Check() {
	q := catalog.Quote{
		Prices:  map[string]catalog.Price{"SKU-1": {UnitPrice: 1399, Currency: "USD"}},
		Unknown: []string{"SKU-404"},
	}

	err := q.Check(catalog.Order{Currency: "USD", Items: []catalog.Item{{SKU: "SKU-1", UnitPrice: 1299}}})
	var mismatch *catalog.MismatchError
	if errors.Is(err, catalog.ErrPriceChanged) && errors.As(err, &mismatch) {
		for _, m := range mismatch.Items {
			fmt.Printf("409: items[%d] %s now costs %d %s\n", m.Index, m.SKU, m.Current.UnitPrice, m.Current.Currency)
		}
	}

	err = q.Check(catalog.Order{Currency: "USD", Items: []catalog.Item{{SKU: "SKU-1", UnitPrice: 1399}, {SKU: "SKU-404", UnitPrice: 100}}})
	if errors.Is(err, catalog.ErrUnknownSKU) && errors.As(err, &mismatch) {
		fmt.Printf("422: items[%d].sku %s is not in the catalog\n", mismatch.Items[0].Index, mismatch.Items[0].SKU)
	}
	// Output:
	// 409: items[0] SKU-1 now costs 1399 USD
	// 422: items[1].sku SKU-404 is not in the catalog
}
