// Command catalogsim runs the product catalog simulator that checkout asks
// for prices through CATALOG_URL. `catalogsim healthcheck` probes a running
// instance (for container healthchecks, as the runtime image has no curl).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "catalogsim:", err)
		os.Exit(1)
	}
}

const usage = "usage: catalogsim [serve|healthcheck]"

// writeTimeout must outlast the slowest answer an experiment scripts
// (injected latencies of seconds); the default server limit of 30 s would
// cut longer injected delays short.
const writeTimeout = 2 * time.Minute

// run is main with its dependencies passed in, so tests start the real
// wiring in-process on port :0.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	command := "serve"
	if len(args) > 1 {
		command = args[1]
	}
	switch command {
	case "serve":
		return serve(ctx, cfg, stdout)
	case "healthcheck":
		return health.Probe(ctx, cfg.HTTPAddr)
	default:
		fmt.Fprintln(stderr, usage)
		return errors.New("unknown command " + command)
	}
}

func serve(ctx context.Context, cfg config, stdout io.Writer) error {
	logger := telemetry.NewLogger(stdout, cfg.LogLevel, "catalogsim")
	sim := catalogsim.New(catalogsim.Config{
		Latency:    cfg.Latency,
		Jitter:     cfg.Jitter,
		AdminToken: cfg.AdminToken,
		Logger:     logger,
	})
	logger.InfoContext(ctx, "starting", "latency", cfg.Latency, "jitter", cfg.Jitter,
		"skus", len(catalogsim.Seed()), "admin_token", cfg.AdminToken != "")
	return httpserver.Serve(ctx, httpserver.Config{
		Addr:            cfg.HTTPAddr,
		ShutdownTimeout: cfg.ShutdownTimeout,
		WriteTimeout:    writeTimeout,
	}, sim, logger)
}
