package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/sync/errgroup"
	"riverqueue.com/riverui"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/idempotency"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// serve wires the worker: database pool, the worker's own protected payment
// client (policy "payment-worker"), River with the charge and prune workers,
// and the HTTP server with probes, metrics and River UI. It blocks until ctx
// is done, then stops River softly (running charges finish) and the server.
func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
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
	wm, err := order.NewWorkerMetrics(reg, pool)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	payer, err := payment.NewProtectedClient("payment-worker", cfg.PaymentURL, cfg.Resilience, rm, logger)
	if err != nil {
		return err
	}

	reconciler, err := order.NewReconciler(pool, cfg.ReconcileAfter, reg, logger)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, order.NewChargeWorker(pool, payer, wm, logger))
	river.AddWorker(workers, idempotency.NewPruneWorker(pool, cfg.KeyRetention, logger))
	river.AddWorker(workers, reconciler)
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues: map[string]river.QueueConfig{
			order.QueuePayments: {MaxWorkers: cfg.Concurrency},
			river.QueueDefault:  {MaxWorkers: 1}, // housekeeping: pruning keys, reconciling orders
		},
		Workers: workers,
		PeriodicJobs: []*river.PeriodicJob{
			idempotency.PeriodicPrune(cfg.PruneInterval),
			order.PeriodicReconcile(cfg.ReconcileInterval),
		},
		JobTimeout:           order.ChargeJobTimeout,
		RescueStuckJobsAfter: cfg.RescueStuckJobsAfter,
		Logger:               logger,
	})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(jobs, nil), Logger: logger, Prefix: "/riverui",
	})
	if err != nil {
		return fmt.Errorf("river ui: %w", err)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return runRiver(gctx, jobs, ui, cfg.ShutdownTimeout, logger) })
	g.Go(func() error {
		handler := routes(pool, reg, ui, cfg)
		return httpserver.Serve(gctx, httpserver.Config{Addr: cfg.HTTPAddr, DrainDelay: cfg.DrainDelay, ReadinessPath: "/ready", ShutdownTimeout: cfg.ShutdownTimeout}, handler, logger)
	})
	return g.Wait()
}

// routes lists every endpoint of the worker's HTTP server.
func routes(pool *pgxpool.Pool, reg *prometheus.Registry, ui http.Handler, cfg config) http.Handler {
	r := chi.NewRouter()
	r.Method(http.MethodGet, "/health", health.Liveness())
	r.Method(http.MethodGet, "/ready", health.Readiness(time.Second, map[string]health.Check{
		"database": func(ctx context.Context) error { return pool.Ping(ctx) },
	}))
	r.Method(http.MethodGet, "/metrics", telemetry.Handler(reg))
	r.Group(func(r chi.Router) {
		// River UI can cancel, retry and delete jobs: in production set
		// RIVERUI_USER and RIVERUI_PASSWORD (and serve it over TLS).
		if cfg.RiverUIUser != "" {
			r.Use(middleware.BasicAuth("River UI", map[string]string{cfg.RiverUIUser: cfg.RiverUIPassword}))
		}
		r.Mount("/riverui", ui)
	})
	return r
}

// runRiver starts River and River UI, retrying while the database is
// unreachable (the process must come up anyway and report /ready 503), and
// on shutdown stops River softly — running jobs finish — then cancels what
// is still running after the timeout. Jobs cancelled that way are retried by
// River (or rescued by another replica), and the provider idempotency key
// makes the retry of a charge that did go through a harmless replay.
func runRiver(ctx context.Context, jobs *river.Client[pgx.Tx], ui *riverui.Handler, timeout time.Duration, logger *slog.Logger) error {
	// River's work contexts derive from Start's: keep them alive past the
	// signal so the soft stop can let running charges finish.
	workCtx := context.WithoutCancel(ctx)
	for {
		err := jobs.Start(workCtx)
		if err == nil {
			break
		}
		logger.WarnContext(ctx, "river did not start, retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	if err := ui.Start(workCtx); err != nil {
		logger.WarnContext(ctx, "river ui did not start", "err", err)
	}
	<-ctx.Done()

	stopCtx, cancel := context.WithTimeout(workCtx, timeout)
	defer cancel()
	if err := jobs.Stop(stopCtx); err == nil {
		return nil
	} else if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stop river: %w", err)
	}
	logger.Warn("jobs still running after the shutdown timeout, cancelling them", "timeout", timeout)
	cancelCtx, cancel2 := context.WithTimeout(workCtx, 5*time.Second)
	defer cancel2()
	return jobs.StopAndCancel(cancelCtx)
}
