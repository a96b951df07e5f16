package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/riverqueue/river/rivertype"
	"golang.org/x/sync/errgroup"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/fleet"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/telemetry"
	"github.com/resilientcheckout/checkout/internal/worker"
)

// serve wires the worker: database pool, the worker's own protected payment
// client (policy "payment-worker") and one for the ledger walk's reads
// (policy "payment-ledger"), the River worker and the HTTP server
// with probes, metrics and River UI. It blocks until ctx is done, then stops
// River softly (running charges finish) and the server.
func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
	tracing, err := telemetry.NewTracing(ctx, cfg.Tracing, logger)
	if err != nil {
		return err
	}
	defer func() {
		if err := tracing.Shutdown(ctx); err != nil {
			logger.Warn("flush traces", "err", err)
		}
	}()
	cfg.Database.Tracer = telemetry.PgxTracer(tracing.Provider)
	pool, err := database.Open(ctx, cfg.Database)
	if err != nil {
		return err
	}
	defer pool.Close() // last: River and the server stop first

	reg := telemetry.NewRegistry()
	rm, err := resilience.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	provider, err := payment.NewProtectedClient("payment-worker", cfg.Payment, cfg.Resilience, rm, logger)
	if err != nil {
		return err
	}
	ledgerReader, err := payment.NewProtectedClient("payment-ledger", cfg.Payment, cfg.LedgerResilience, rm, logger)
	if err != nil {
		return err
	}
	// The tracing plugin links each job's span to the trace that inserted
	// the job (for a charge: the request that deferred the order).
	cfg.Worker.Plugins = []rivertype.Plugin{telemetry.RiverPlugin(tracing.Provider)}
	if cfg.FleetBreaker {
		// One breaker with checkout's towards the provider (internal/fleet):
		// the dependency, not the role, is the key.
		stop, err := fleet.Join(ctx, pool, cfg.FleetListenURL, payment.Dependency, provider.Policy(), reg, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	w, err := worker.New(pool, orderpayment.New(provider), ledgerReader, cfg.Worker, reg, logger)
	if err != nil {
		return err
	}
	handler := worker.Routes(worker.RoutesConfig{
		Database: func(ctx context.Context) error { return pool.Ping(ctx) },
		Registry: reg, UI: w.UI(),
		RiverUIUser: cfg.RiverUIUser, RiverUIPassword: cfg.RiverUIPassword,
		TracerProvider: tracing.Provider,
	})

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(gctx) })
	g.Go(func() error {
		return httpserver.Serve(gctx, httpserver.Config{Addr: cfg.HTTPAddr, DebugAddr: cfg.DebugAddr, DrainDelay: cfg.DrainDelay, ReadinessPath: "/ready", ShutdownTimeout: cfg.ShutdownTimeout}, handler, logger)
	})
	return g.Wait()
}
