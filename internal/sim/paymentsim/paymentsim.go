// Package paymentsim simulates the outside payment provider that checkout charges.
//
// It serves the provider protocol — the PaymentIntents subset of Stripe's API (create,
// confirmed at once or by a confirm later, retrieve, the newest-first list, a search that
// lags; see intent.go) — the way a real provider does: a bounded Idempotency-Key cache that
// forgets keys after KeyRetention, replays of finished requests, a record of PaymentIntents
// that outlives the keys and answers reads, declines, ~200 ms of latency that grows once
// more charges arrive than it has capacity for (see scaledLatency), an optional rate limit
// (see chargeLimiter), and charges that complete even when the caller has already given up.
// Faults (latency, latency distributions, brownouts, errors, hangs, outages, refused
// connections, lost responses, reduced capacity, rate limits) can be switched on, or
// scheduled, at runtime through an admin API, so the demo, the experiment and the tests can
// break the provider on purpose and watch checkout cope.
//
// The package deliberately shares no code with internal/payment, the client: shared protocol
// code would mirror a bug on both sides and hide it from the tests.
package paymentsim

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// Defaults for Config. The latency is the "provider answers in ~200 ms" figure of the article
// this project reproduces.
const (
	DefaultLatency   = 200 * time.Millisecond
	DefaultJitter    = 20 * time.Millisecond
	DefaultLedgerCap = 100_000
	// DefaultKeyRetention is how long an idempotency key is remembered: Stripe keeps keys for
	// at least 24 hours.
	DefaultKeyRetention = 24 * time.Hour
	// DefaultSearchLag is how long after it is recorded a PaymentIntent shows in search:
	// Stripe documents its search as lagging writes by under a minute, up to an hour in an
	// outage.
	DefaultSearchLag = time.Minute
	// DefaultChargeCapFactor sizes the record of PaymentIntents against the key cache when
	// Config.ChargeCap is zero: ten times as many intents as keys, so the list still holds a
	// charge long after its key is forgotten (at 40 charges/s the default 100,000 keys last
	// ~42 minutes and 1,000,000 intents ~7 hours). A kept PaymentIntent costs ≈ 350 bytes
	// (measured with 36-character order ids, each charged once), so the default record tops
	// out near 350 MB.
	DefaultChargeCapFactor = 10
)

// Config configures a Simulator. Latency, Jitter and Capacity are used as given (zero means
// instant answers and no capacity limit, which tests rely on); the other zero values pick a
// default.
type Config struct {
	// Latency is how long processing a charge takes before any injected fault latency.
	Latency time.Duration
	// Jitter spreads Latency uniformly over [Latency-Jitter, Latency+Jitter].
	Jitter time.Duration
	// LedgerCap bounds the idempotency keys kept in memory; the oldest are evicted first. A
	// key evicted while its charge is still processing, or reused after eviction, is
	// processed as new, as with a provider whose keys expired.
	LedgerCap int
	// KeyRetention is how long an idempotency key is remembered (besides LedgerCap): a key
	// older than this is processed as new, as with Stripe after 24 hours. Zero means
	// DefaultKeyRetention.
	KeyRetention time.Duration
	// SearchLag is how long after it is recorded a PaymentIntent shows in search. Zero means
	// DefaultSearchLag; a negative value none.
	SearchLag time.Duration
	// ChargeCap bounds the PaymentIntents kept for reads (retrieve, list, search) and the
	// duplicate count, whatever their status, the oldest forgotten first. Zero means
	// DefaultChargeCapFactor × LedgerCap; a value below LedgerCap is raised to it, so an
	// intent is never forgotten before its key.
	ChargeCap int
	// LatencySigma, when positive, makes each charge's processing time log-normal with median
	// Latency and this σ (at most MaxLatencySigma; see logNormal), instead of Latency ±
	// Jitter. LatencyCap truncates it (see logNormal.quantile); zero means no cap.
	LatencySigma float64
	LatencyCap   time.Duration
	// Capacity is how many charges the provider processes at full speed at once; beyond it
	// every charge slows down with the queue (see scaledLatency). Zero means unlimited, which
	// tests rely on; the binary's default is DefaultCapacity. A "capacity" fault overrides it.
	Capacity int
	// RateLimit is how many charges a second the provider accepts; above it a charge is
	// answered 429 with Retry-After (see chargeLimiter). Zero, the default, means no limit. A
	// "rate_limit" fault overrides it.
	RateLimit int
	// AdminToken, when set, must be sent as "Authorization: Bearer <token>" to the admin API.
	AdminToken string
	// Logger receives one line per fault change; nil discards.
	Logger *slog.Logger
	// Random returns a number in [0, 1) for jitter and error rates; tests inject a fixed one.
	Random func() float64
}

// Simulator is the payment provider. It is an http.Handler serving the protocol, /health,
// /metrics and the admin API under /admin/.
type Simulator struct {
	cfg      Config
	srv      *simulator.Server[Fault]
	ledger   *ledger
	inflight *inflight
	limiter  chargeLimiter
	// processing counts the charges in the capacity model's workers (see scaledLatency).
	processing atomic.Int64
	metrics    *metrics
}

// New returns a Simulator with an empty ledger and no faults.
func New(cfg Config) *Simulator {
	if cfg.LedgerCap <= 0 {
		cfg.LedgerCap = DefaultLedgerCap
	}
	if cfg.KeyRetention <= 0 {
		cfg.KeyRetention = DefaultKeyRetention
	}
	switch {
	case cfg.SearchLag == 0:
		cfg.SearchLag = DefaultSearchLag
	case cfg.SearchLag < 0:
		cfg.SearchLag = 0
	}
	if cfg.ChargeCap <= 0 {
		cfg.ChargeCap = DefaultChargeCapFactor * cfg.LedgerCap
	}
	cfg.ChargeCap = max(cfg.ChargeCap, cfg.LedgerCap)
	s := &Simulator{
		cfg: cfg,
		srv: simulator.NewServer[Fault](simulator.Options{
			Name: "paymentsim", AdminToken: cfg.AdminToken, MaxAdminBody: maxBodyBytes,
			Logger: cfg.Logger, Random: cfg.Random,
		}),
		ledger: newLedger(cfg.LedgerCap, cfg.KeyRetention, cfg.ChargeCap),
	}
	s.metrics = newMetrics(s.srv.Registry)
	s.srv.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "paymentsim_duplicate_references",
		Help: "References (order ids) charged successfully more than once since start or the last reset; must stay 0.",
	}, func() float64 { return float64(s.ledger.duplicateReferences()) }))
	s.inflight = newInflight(s.metrics)
	s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.srv.ServeHTTP(w, r)
}

// Idle returns a channel that is closed once no charge request is being processed. Requests
// keep processing after their client has gone, so shutdown and tests wait on it to know every
// charge has been recorded.
func (s *Simulator) Idle() <-chan struct{} {
	return s.inflight.idle()
}

// Stats returns the ledger statistics served by GET /admin/stats.
func (s *Simulator) Stats() Stats {
	st := s.ledger.stats()
	st.InFlight, st.MaxInFlight, st.MaxInFlightDuringFault = s.inflight.counts()
	st.ChargesDuringFault, st.ChargesProcessed, st.ChargesOverCapacity, st.LookupsDuringFault = s.inflight.arrivals()
	st.Capacity = s.cfg.Capacity
	st.RateLimited = s.limiter.refusals()
	return st
}

// Reset forgets every idempotency key and charge and restarts the max in-flight counts, the
// arrival counts and the rate limit's bucket, so experiments can be repeated on a clean
// provider. Faults are left as they are.
func (s *Simulator) Reset() {
	s.ledger.reset()
	s.inflight.resetMax()
	s.limiter.reset()
}
