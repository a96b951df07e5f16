package catalog

import (
	"context"

	"github.com/resilientcheckout/checkout/internal/order"
)

// CheckPrices is Check for the checkout flow (order.PriceChecker): the
// order's currency and items against the catalog. Its errors are Check's,
// unchanged, for the HTTP layer to map.
func (s *Service) CheckPrices(ctx context.Context, currency string, items []order.Item) (order.PriceCheck, error) {
	o := Order{Currency: currency, Items: make([]Item, len(items))}
	for i, it := range items {
		o.Items[i] = Item{SKU: it.SKU, UnitPrice: it.UnitPrice}
	}
	q, err := s.Check(ctx, o)
	return order.PriceCheck{Stale: q.Stale, Age: q.Age}, err
}

var _ order.PriceChecker = (*Service)(nil)
