// Command checkout serves the checkout API. `checkout migrate` applies the
// database schema and exits; `checkout healthcheck` probes a running
// instance (for container healthchecks, as the runtime image has no curl);
// `checkout breaker open|clear|status` is the operator's switch for the
// fleet's shared circuit breakers.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

const usage = "usage: checkout [serve|migrate|healthcheck|breaker|reconcile]"

// run is main with its dependencies passed in, so tests start the real
// wiring in-process on port :0.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := telemetry.NewLogger(stdout, cfg.LogLevel, "checkout")

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
	case "migrate":
		return migrate(ctx, cfg, logger)
	case "healthcheck":
		return health.Probe(ctx, cfg.HTTPAddr)
	case "breaker":
		return breaker(ctx, cfg, args[2:], stdout, stderr)
	case "reconcile":
		return reconcile(ctx, cfg, stdout)
	default:
		fmt.Fprintln(stderr, usage)
		return errors.New("unknown command " + command)
	}
}

func migrate(ctx context.Context, cfg config, logger *slog.Logger) error {
	pool, err := database.Open(ctx, cfg.Database)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := database.AwaitConnection(ctx, pool, cfg.MigrateWait, logger); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := database.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	logger.InfoContext(ctx, "schema up to date")
	return nil
}
