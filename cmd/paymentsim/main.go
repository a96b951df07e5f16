// Command paymentsim runs the payment provider simulator that checkout and the worker charge
// when STRIPE_API_BASE names it. `paymentsim healthcheck` probes a running instance (for
// container healthchecks, as the runtime image has no curl).
package main

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

var command = simulator.Command[config]{Name: "paymentsim", LoadConfig: loadConfig, New: newSimulator}

func main() { command.Main() }

func newSimulator(cfg config, logger *slog.Logger) (http.Handler, []any) {
	sim := paymentsim.New(paymentsim.Config{
		Latency:      cfg.Latency,
		Jitter:       cfg.Jitter,
		LatencySigma: cfg.LatencySigma,
		LatencyCap:   cfg.LatencyCap,
		LedgerCap:    cfg.LedgerCap,
		ChargeCap:    cfg.ChargeCap,
		KeyRetention: cfg.KeyRetention,
		SearchLag:    searchLag(cfg.SearchLag),
		Capacity:     cfg.Capacity,
		RateLimit:    cfg.RateLimit,
		AdminToken:   cfg.AdminToken,
		Logger:       logger,
	})
	return sim, []any{"latency_sigma", cfg.LatencySigma, "latency_cap", cfg.LatencyCap,
		"ledger_cap", cfg.LedgerCap, "key_retention", cfg.KeyRetention, "capacity", cfg.Capacity, "rate_limit", cfg.RateLimit}
}

// searchLag maps PAYMENTSIM_SEARCH_LAG=0 (no lag) onto the Config's "none", a negative lag.
func searchLag(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
