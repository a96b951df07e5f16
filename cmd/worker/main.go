// Command worker charges the orders checkout could not charge synchronously
// (pending_payment), and those whose checkout process died mid-request, once
// the payment provider recovers. It serves /health, /ready, /metrics and
// River UI (/riverui/) on its own port; `worker healthcheck` probes a running
// instance for container healthchecks.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

const usage = "usage: worker [serve|healthcheck]"

// run is main with its dependencies passed in, so tests start the real
// wiring in-process on port :0.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := telemetry.NewLogger(stdout, cfg.LogLevel, "worker")

	command := "serve"
	if len(args) > 1 {
		command = args[1]
	}
	switch command {
	case "serve":
		if cfg.PaymentErr != nil {
			return fmt.Errorf("configuration: %w", cfg.PaymentErr)
		}
		return serve(ctx, cfg, logger)
	case "healthcheck":
		return health.Probe(ctx, cfg.HTTPAddr)
	default:
		fmt.Fprintln(stderr, usage)
		return errors.New("unknown command " + command)
	}
}
