package order

import (
	"context"
	"time"
)

// PriceChecker confirms an order's prices against the product catalog
// before anything is written (CATALOG_URL; internal/catalog implements it).
// Its errors are the catalog's — unknown SKU, changed price, catalog
// unavailable — and reach the HTTP layer unchanged; this package only
// decides when the check runs.
type PriceChecker interface {
	CheckPrices(ctx context.Context, currency string, items []Item) (PriceCheck, error)
}

// PriceCheck is how a passed check was made.
type PriceCheck struct {
	// Stale: the catalog was unavailable and cached prices up to Age old
	// were used (within CATALOG_MAX_STALENESS).
	Stale bool
	Age   time.Duration
}
