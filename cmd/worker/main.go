// Command worker charges the orders checkout could not charge synchronously
// (pending_payment) once the payment provider recovers. It serves /health,
// /ready and /metrics on its own port; `worker healthcheck` probes a running
// instance for container healthchecks.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/httpserver"
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
		return serve(ctx, cfg, logger)
	case "healthcheck":
		return health.Probe(ctx, cfg.HTTPAddr)
	default:
		fmt.Fprintln(stderr, usage)
		return errors.New("unknown command " + command)
	}
}

func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
	pool, err := database.Open(ctx, cfg.Database)
	if err != nil {
		return err
	}
	defer pool.Close()

	reg := telemetry.NewRegistry()
	r := chi.NewRouter()
	r.Method(http.MethodGet, "/health", health.Liveness())
	r.Method(http.MethodGet, "/ready", health.Readiness(time.Second, map[string]health.Check{
		"database": func(ctx context.Context) error { return pool.Ping(ctx) },
	}))
	r.Method(http.MethodGet, "/metrics", telemetry.Handler(reg))
	return httpserver.Serve(ctx, httpserver.Config{Addr: cfg.HTTPAddr, ShutdownTimeout: cfg.ShutdownTimeout}, r, logger)
}
