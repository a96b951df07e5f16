// Package catalog checks an order's prices against the product catalog, a
// read dependency of POST /orders that may be slow or down.
//
// Before checkout writes anything, it asks a [Service] to [Service.Check]
// the order: every item's SKU must be in the catalog at the unit price and
// in the currency the client sent, or the order is rejected with a
// [*MismatchError] (an unknown SKU, a changed price or currency). The
// prices come from the catalog service over its HTTP protocol
// (GET /v1/prices?skus=…), behind a resilience policy named "catalog" of
// its own (retry, breaker, bulkhead, timeout), and through a per-SKU cache
// that is the policy's fallback:
//
//   - an entry younger than Config.TTL is used without asking the catalog;
//   - an older one is refreshed, and if the catalog is unavailable (breaker
//     open, bulkhead full, timeout, 5xx, connection error) it is still used
//     while it is at most Config.MaxStaleness old, and the [Quote] says so
//     (Stale, Age);
//   - otherwise the lookup fails with an [*UnavailableError] carrying a
//     Retry-After hint.
//
// Concurrent lookups that miss the same SKUs share one catalog request
// (golang.org/x/sync/singleflight), so an expired hot SKU costs the catalog
// one request, not one per order in flight.
//
// The package knows nothing of HTTP responses: the caller maps its error
// kinds (ErrUnknownSKU, ErrPriceChanged, ErrUnavailable) to statuses. Only
// orders.go knows internal/order: it prices an order's lines for the order
// service through the lookup above. Like
// internal/payment, it shares no code with its simulator
// (internal/sim/catalogsim).
package catalog

import (
	"errors"
	"fmt"
	"time"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// Price is a SKU's price in the catalog: integer minor units of Currency.
type Price struct {
	UnitPrice int64
	Currency  string
}

// Quote is the catalog's answer for a set of SKUs, as a lookup found it.
type Quote struct {
	// Prices holds the price of every requested SKU the catalog knows.
	Prices map[string]Price
	// Unknown lists the requested SKUs the catalog does not hold, sorted.
	Unknown []string
	// Stale reports that at least one price or unknown verdict is older
	// than the TTL: the catalog could not be asked, and the cache's last
	// good answer was used instead.
	Stale bool
	// Age is how old the oldest answer used is, counted from when its
	// request was sent: about the request's duration when the catalog has
	// just answered for every SKU, below the TTL when fresh cache entries
	// were used, up to MaxStaleness when Stale.
	Age time.Duration
}

// Order is what the price check reads of an order: its currency and, per
// item, the SKU and the unit price the client was shown.
type Order struct {
	Currency string
	Items    []Item
}

// Item is one order line as the price check sees it.
type Item struct {
	SKU       string
	UnitPrice int64
}

// Defaults for Config.
const (
	// DefaultTTL is how long a catalog answer is used without asking again
	// (30 s): a price change reaches checkout within it.
	DefaultTTL = 30 * time.Second
	// DefaultMaxStaleness bounds how old an answer may be and still be
	// served while the catalog is unavailable (10 min).
	DefaultMaxStaleness = 10 * time.Minute
	// DefaultCacheSize bounds the cached SKUs. An entry costs about 200
	// bytes (a SKU of up to 64 bytes, its price, a timestamp and the LRU's
	// list node), so 10,000 entries are about 2 MB per process and hold a
	// large shop's active assortment; the least recently used go first.
	DefaultCacheSize = 10_000
	// DefaultBudget bounds one catalog lookup, retries included. The
	// policy's defaults allow two attempts of 500 ms; 1 s leaves most of a
	// 3 s client timeout to the database write and the 1.5 s charge budget
	// that follow the check.
	DefaultBudget = time.Second
	// DefaultRetryAfter is the Retry-After hint of an unavailable lookup
	// when the breaker is not open and so cannot tell when to come back.
	DefaultRetryAfter = time.Second
)

// Name is the catalog policy's name: its breaker, bulkhead and retry
// metrics carry it as their name label, beside the payment's.
const Name = "catalog"

// Config configures a [Service]. Start from [DefaultConfig]; cmd/checkout
// maps CATALOG_URL, CATALOG_TTL and CATALOG_MAX_STALENESS onto it.
type Config struct {
	// URL is the catalog's base URL, e.g. http://localhost:8083. An empty
	// CATALOG_URL means no price check at all: the caller builds no
	// Service, and New rejects an empty URL.
	URL string
	// TTL is how long an answer is fresh (used without asking the catalog).
	TTL time.Duration
	// MaxStaleness is how old an answer may be and still be served while
	// the catalog is unavailable. It must not be below TTL.
	MaxStaleness time.Duration
	// CacheSize bounds the SKUs kept, least recently used evicted first.
	CacheSize int
	// Budget bounds one catalog request, retries included. A caller whose
	// own deadline is shorter stops waiting at its deadline (and falls back
	// to the cache); the request carries on for whoever shares it.
	Budget time.Duration
	// Resilience tunes the policy named "catalog", the same settings the
	// payment policy takes. Its maximum concurrency also caps the HTTP client's
	// connections in protected mode.
	Resilience resilience.Config
}

// DefaultConfig returns the defaults above and the catalog policy's own.
func DefaultConfig() Config {
	return Config{
		TTL:          DefaultTTL,
		MaxStaleness: DefaultMaxStaleness,
		CacheSize:    DefaultCacheSize,
		Budget:       DefaultBudget,
		Resilience:   DefaultResilience(),
	}
}

// DefaultResilience is the catalog policy's stack, derived from the demo
// catalog's latency (20 ms ± 5 ms: p99 ≈ 25 ms) as docs/operations.md,
// "Choosing the settings for your provider", derives the payment's, not
// inherited from the payment provider's. The breaker keeps the article's
// rules (a window of the last 10 calls, 50 %): it sees cache misses only,
// and still trips within a few failed lookups at 20 orders/s.
func DefaultResilience() resilience.Config {
	d := resilience.DefaultConfig()
	// Ten times the p99 for an attempt, four times it for a slow call: a
	// catalog that answers in 100 ms is in trouble, and two attempts fit
	// the 1 s budget with room for the backoff.
	d.AttemptTimeout = 250 * time.Millisecond
	d.SlowCallThreshold = 100 * time.Millisecond
	// A price read moves nothing, and misses of one SKU are coalesced into
	// one request: an abandoned read leaves the catalog little to finish,
	// so no slot is held for it (the payment's hold is its provider's 10 s).
	d.AbandonedHold = 0
	return d
}

// Validate reports every setting that is out of range, naming the field.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("catalog: "+format, args...))
		}
	}
	check(c.TTL > 0, "TTL %v must be positive", c.TTL)
	check(c.MaxStaleness >= c.TTL, "MaxStaleness %v must not be below TTL %v", c.MaxStaleness, c.TTL)
	check(c.CacheSize >= 1, "CacheSize %d must be at least 1", c.CacheSize)
	check(c.Budget > 0, "Budget %v must be positive", c.Budget)
	if err := c.Resilience.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
