// Command paymentsim runs the payment provider simulator that checkout and the worker charge
// through PAYMENT_URL. `paymentsim healthcheck` probes a running instance (for container
// healthchecks, as the runtime image has no curl).
package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

var command = simulator.Command[config]{Name: "paymentsim", LoadConfig: loadConfig, New: newSimulator}

func main() { command.Main() }

// run is main with its dependencies passed in, so tests start the real wiring in-process on
// port :0.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return command.Run(ctx, args, getenv, stdout, stderr)
}

func newSimulator(cfg config, logger *slog.Logger) (http.Handler, []any) {
	sim := paymentsim.New(paymentsim.Config{
		Latency:    cfg.Latency,
		Jitter:     cfg.Jitter,
		LedgerCap:  cfg.LedgerCap,
		ChargeCap:  cfg.ChargeCap,
		Capacity:   cfg.Capacity,
		AdminToken: cfg.AdminToken,
		Logger:     logger,
	})
	return sim, []any{"ledger_cap", cfg.LedgerCap, "capacity", cfg.Capacity}
}
