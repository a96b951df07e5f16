// Package catalogsim simulates the product catalog that checkout asks for
// prices before it accepts an order.
//
// It serves the catalog protocol (GET /v1/prices?skus=A,B) from an
// in-memory price list seeded with the SKUs of the README walkthrough and
// the tests, with a few milliseconds of latency. Faults (added latency, an
// error rate, an outage) can be switched on, or scheduled, at runtime
// through an admin API, and prices can be changed there too, so the demo,
// the experiment and the tests can break the catalog or move a price and
// watch checkout's stale cache and price check cope.
//
// Like internal/sim/paymentsim, it deliberately shares no code with its client,
// internal/catalog: shared protocol code would mirror a bug on both sides
// and hide it from the tests.
package catalogsim

import (
	"log/slog"
	"maps"
	"net/http"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// Defaults for Config. A catalog read is a lookup in a service close to
// checkout, far quicker than a charge: 20 ms stands for it, well inside
// any attempt timeout, so only injected faults make it slow.
const (
	DefaultLatency = 20 * time.Millisecond
	DefaultJitter  = 5 * time.Millisecond
)

// maxSKUs is the most SKUs one request may name, the protocol's limit.
const maxSKUs = 100

// Price is one SKU's price, as the protocol writes it.
type Price struct {
	UnitPrice int64  `json:"unit_price"`
	Currency  string `json:"currency"`
}

// Seed returns the catalog the simulator starts with: the SKUs and prices
// the README walkthrough and the tests order.
func Seed() map[string]Price {
	return map[string]Price{
		"SKU-1": {UnitPrice: 1299, Currency: "USD"},
		"SKU-2": {UnitPrice: 500, Currency: "USD"},
		"SKU-3": {UnitPrice: 2499, Currency: "USD"},
		"SKU-9": {UnitPrice: 100, Currency: "EUR"},
	}
}

// Config configures a Simulator. Latency and Jitter are used as given
// (zero means instant answers, which tests rely on).
type Config struct {
	// Latency is how long answering takes before any injected latency.
	Latency time.Duration
	// Jitter spreads Latency uniformly over [Latency-Jitter, Latency+Jitter].
	Jitter time.Duration
	// Prices is the starting catalog; nil means Seed().
	Prices map[string]Price
	// AdminToken, when set, must be sent as "Authorization: Bearer <token>"
	// to the admin API.
	AdminToken string
	// Logger receives one line per fault or price change; nil discards.
	Logger *slog.Logger
	// Random returns a number in [0, 1) for jitter and error rates; tests
	// inject a fixed one.
	Random func() float64
}

// Simulator is the catalog. It is an http.Handler serving the protocol,
// /health, /metrics and the admin API under /admin/.
type Simulator struct {
	cfg     Config
	srv     *simulator.Server[Fault]
	book    *book
	stats   *stats
	metrics *metrics
}

// New returns a Simulator holding cfg.Prices and no faults.
func New(cfg Config) *Simulator {
	if cfg.Prices == nil {
		cfg.Prices = Seed()
	}
	s := &Simulator{
		cfg: cfg,
		srv: simulator.NewServer[Fault](simulator.Options{
			Name: "catalogsim", AdminToken: cfg.AdminToken, MaxAdminBody: maxAdminBody,
			Logger: cfg.Logger, Random: cfg.Random,
		}),
		book: newBook(maps.Clone(cfg.Prices)),
	}
	s.metrics = newMetrics(s.srv.Registry)
	s.stats = newStats(s.metrics)
	s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.srv.ServeHTTP(w, r)
}

// Stats returns the request counts served by GET /admin/stats.
func (s *Simulator) Stats() Stats { return s.stats.snapshot() }

// SetPrice adds sku to the catalog or changes its price.
func (s *Simulator) SetPrice(sku string, p Price) { s.book.set(sku, p) }

// Reset restores the starting catalog and zeroes the request counts, so
// experiments can be repeated on a clean catalog. Faults are left as they
// are.
func (s *Simulator) Reset() {
	s.book.replace(maps.Clone(s.cfg.Prices))
	s.stats.reset()
}
