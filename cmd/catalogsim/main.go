// Command catalogsim runs the product catalog simulator that checkout asks
// for prices through CATALOG_URL. `catalogsim healthcheck` probes a running
// instance (for container healthchecks, as the runtime image has no curl).
package main

import (
	"log/slog"
	"net/http"

	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

var command = simulator.Command[config]{Name: "catalogsim", LoadConfig: loadConfig, New: newSimulator}

func main() { command.Main() }

func newSimulator(cfg config, logger *slog.Logger) (http.Handler, []any) {
	sim := catalogsim.New(catalogsim.Config{Latency: cfg.Latency, Jitter: cfg.Jitter, AdminToken: cfg.AdminToken, Logger: logger})
	return sim, []any{"skus", len(catalogsim.Seed())}
}
