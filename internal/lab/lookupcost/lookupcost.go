// Package lookupcost measures what the lookup that settles an unknown charge outcome costs in
// each of the two designs docs/design.md weighs in "The key, the lookup and the list":
//
//   - one-step, the product's: one request creates and confirms the PaymentIntent under the
//     key order-<id> (payment.Client.Charge); an unknown outcome is settled by the product's
//     lookup, the PaymentIntents list over order.LookupFor's window filtered by
//     metadata.order_id (payment.Client.FindCharges);
//   - two-step, Stripe's rocket-rides-atomic pattern: create the PaymentIntent unconfirmed
//     (key order-<id>-create), store its id in PostgreSQL, then confirm it (key
//     order-<id>-confirm); an unknown outcome is settled by retrieving that id.
//
// Both drive the real paymentsim binary through stripe-go with the product's client settings,
// open loop, in three scenarios: the provider healthy, the provider rate limited, and the
// seed outage (every call hung for 10 s in the middle of the load), whose unknown outcomes
// are settled afterwards and audited against the provider's list. It measures the designs,
// not the protection stack: no breaker, limit or retry layer stands in front of either, and
// each provider request gets the product's per-attempt timeout. cmd/lookupcost runs it.
package lookupcost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Config is a run's settings; DefaultConfig's are the ones docs/measurements.md reports.
type Config struct {
	// Paymentsim is the path of the paymentsim binary, started with its defaults (200 ms).
	Paymentsim string
	// DatabaseURL is a PostgreSQL database whose role may create databases; the run creates
	// a database of its own for the two-step design's writes and drops it at the end.
	DatabaseURL string
	// LogDir receives paymentsim's log.
	LogDir string
	// Rate is the orders a second of every load, Duration the healthy and rate-limited loads'
	// length; OutageLoad is the seed outage's load, with the hang from HangAt for HangFor.
	Rate       int
	Duration   time.Duration
	OutageLoad time.Duration
	HangAt     time.Duration
	HangFor    time.Duration
	// RateLimit is the provider's rate limit in the rate-limited scenario, requests a second.
	RateLimit int
	// Timeout bounds each provider request: the product's per-attempt timeout.
	Timeout time.Duration
	// Settlers is how many unknown outcomes are looked up at once: the product's concurrency
	// limit's maximum, which its lookups share with its charges.
	Settlers int
	// Progress receives a line as each scenario starts; nil discards.
	Progress io.Writer
}

// DefaultConfig: 40 orders/s, 15 s loads, the seed outage's 10 s hang in a 30 s load, a
// 50 requests/s rate limit, the product's 400 ms attempt timeout and 20 concurrent lookups.
func DefaultConfig() Config {
	return Config{
		Rate: 40, Duration: 15 * time.Second,
		OutageLoad: 30 * time.Second, HangAt: 10 * time.Second, HangFor: 10 * time.Second,
		RateLimit: 50, Timeout: 400 * time.Millisecond, Settlers: 20,
	}
}

// Run starts paymentsim and the database, runs every scenario for both designs, one after
// the other on a provider reset between them, and reports them.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.LogDir == "" {
		cfg.LogDir = os.TempDir()
	}
	began := time.Now()
	sim, err := startPaymentsim(ctx, cfg.Paymentsim, filepath.Join(cfg.LogDir, "lookupcost-paymentsim.log"))
	if err != nil {
		return nil, err
	}
	defer sim.stop()
	db, err := openStore(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer db.close()

	one, err := newOneStep(sim.url, cfg)
	if err != nil {
		return nil, err
	}
	two := newTwoStep(sim.url, cfg, db)
	report := &Report{Config: cfg}
	for _, sc := range []struct {
		name string
		run  func(context.Context, design) (Phase, error)
	}{
		{"healthy", func(ctx context.Context, d design) (Phase, error) { return healthy(ctx, cfg, sim, d) }},
		{"rate limited", func(ctx context.Context, d design) (Phase, error) { return rateLimited(ctx, cfg, sim, d) }},
		{"seed outage", func(ctx context.Context, d design) (Phase, error) { return outage(ctx, cfg, sim, d, one) }},
	} {
		for _, d := range []design{one, two} {
			fmt.Fprintf(cfg.Progress, "lookupcost: %s, %s\n", sc.name, d.name())
			if err := sim.reset(ctx); err != nil {
				return nil, err
			}
			p, err := sc.run(ctx, d)
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", sc.name, d.name(), err)
			}
			p.Scenario, p.Design = sc.name, d.name()
			report.Phases = append(report.Phases, p)
		}
	}
	report.Took = time.Since(began).Round(time.Second)
	return report, nil
}

// healthy is the provider at its defaults under the load.
func healthy(ctx context.Context, cfg Config, sim *paymentsim, d design) (Phase, error) {
	return load(ctx, d, newOrders(cfg.Rate, cfg.Duration), nil)
}

// rateLimited is the load against the provider's rate limit; a 429 is waited out
// (Retry-After) and the request sent again under its key, as the product defers a
// throttled charge.
func rateLimited(ctx context.Context, cfg Config, sim *paymentsim, d design) (Phase, error) {
	if err := sim.fault(ctx, fmt.Sprintf(`{"rate_limit":%d}`, cfg.RateLimit)); err != nil {
		return Phase{}, err
	}
	return load(ctx, d, newOrders(cfg.Rate, cfg.Duration), nil)
}

// outage is the seed outage: every call hung from HangAt for HangFor under the load. Each
// order gets one attempt; the outcomes left unknown are settled once the load is over, by
// cfg.Settlers lookups at once, and the provider's list is audited against every order.
func outage(ctx context.Context, cfg Config, sim *paymentsim, d design, auditor *oneStep) (Phase, error) {
	orders := newOrders(cfg.Rate, cfg.OutageLoad)
	hang := window{from: orders[0].due.Add(cfg.HangAt)}
	hang.to = hang.from.Add(cfg.HangFor)
	fault := fmt.Sprintf(`{"hang":true,"start_in":%q,"duration":%q}`, time.Until(hang.from), cfg.HangFor)
	if err := sim.fault(ctx, fault); err != nil {
		return Phase{}, err
	}
	p, err := load(ctx, d, orders, &hang)
	if err != nil {
		return p, err
	}
	p.settle(ctx, d, orders, cfg.Settlers)
	if p.Audit, err = auditor.audit(ctx, orders); err != nil {
		return p, err
	}
	if stats, err := sim.duplicates(ctx); err != nil {
		return p, err
	} else if stats != p.Audit.Doubled {
		return p, fmt.Errorf("paymentsim counts %d orders charged twice, its list %d", stats, p.Audit.Doubled)
	}
	return p, nil
}

// errUnexpected: an answer neither design expects in these scenarios (a decline, a refusal):
// a bug of the lab's, which refuses the run.
var errUnexpected = errors.New("unexpected answer")
