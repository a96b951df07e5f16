package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/resilientcheckout/checkout/internal/api"
	"github.com/resilientcheckout/checkout/internal/auth"
	"github.com/resilientcheckout/checkout/internal/catalog"
	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/fleet"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// serve wires checkout: database pool, the protected payment client, the
// order service and the HTTP server. Checkout inserts the charge job of a
// deferred order with River's InsertTx (see order.Service.Place); the worker
// runs the jobs.
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
	defer pool.Close() // after the server has drained its requests

	reg := telemetry.NewRegistry()
	resilienceMetrics, err := resilience.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	apiMetrics, err := api.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	provider, err := payment.NewProtectedClient("payment", cfg.Payment, cfg.Resilience, resilienceMetrics, logger)
	if err != nil {
		return err
	}
	if cfg.FleetBreaker && cfg.Resilience.Mode == resilience.ModeProtected {
		// The API's and the workers' breakers are one breaker towards the
		// provider (internal/fleet); stopped before the pool closes.
		stop, err := fleet.Join(ctx, pool, cfg.FleetListenURL, payment.Dependency, provider.Policy(), reg, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	apiPool, healthPool, err := newPools(cfg, reg)
	if err != nil {
		return err
	}
	// Checkout only inserts jobs (the deferred orders' charge jobs); an
	// insert-only River client runs nothing. Its tracing plugin writes the
	// request's trace context into each job's metadata.
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Plugins: []rivertype.Plugin{telemetry.RiverPlugin(tracing.Provider)},
	})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}

	orders := order.NewService(pool, orderpayment.New(provider), jobs, cfg.Orders, logger)
	if cfg.Catalog.URL != "" {
		catalogMetrics, err := catalog.NewMetrics(reg)
		if err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
		prices, err := catalog.New(cfg.Catalog, catalog.Options{Metrics: catalogMetrics, Resilience: resilienceMetrics, Logger: logger})
		if err != nil {
			return err
		}
		orders.WithPriceCheck(prices)
	} else {
		logger.WarnContext(ctx, "CATALOG_URL is not set: item prices from clients are trusted")
	}

	deps := api.Deps{
		Logger:         logger,
		Registry:       reg,
		Metrics:        apiMetrics,
		Orders:         orders,
		Database:       func(ctx context.Context) error { return pool.Ping(ctx) },
		APIPool:        apiPool,
		HealthPool:     healthPool,
		TracerProvider: tracing.Provider,
		// With METRICS_ADDR set, /metrics is served there only.
		MetricsElsewhere: cfg.MetricsAddr != "",
	}
	if cfg.RateLimit.Requests > 0 {
		deps.RateLimit = &cfg.RateLimit
	}
	if cfg.Auth.Issuer != "" {
		authMetrics, err := auth.NewMetrics(reg)
		if err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
		verifier, err := auth.New(cfg.Auth, auth.Options{Metrics: authMetrics, Resilience: resilienceMetrics, Logger: logger})
		if err != nil {
			return err
		}
		// Keys are fetched in the background: an issuer that is down at
		// start does not stop checkout from starting, nor /ready from
		// answering (docs/design.md, "Authentication").
		go verifier.Run(ctx)
		deps.Authenticator = verifier
	} else {
		logger.WarnContext(ctx, "AUTH_ISSUER is not set: authentication is off, and any caller may act for any customer")
	}
	handler := api.NewServer(deps)
	if int(cfg.Database.MaxConns) < cfg.APIPool.Size {
		// Each business request holds one connection at a time; with fewer
		// connections than API slots, requests queue for the database and
		// turn into 503s under load even while Postgres is healthy.
		logger.WarnContext(ctx, "DB_MAX_CONNS is below API_POOL_SIZE", "db_max_conns", cfg.Database.MaxConns, "api_pool_size", cfg.APIPool.Size)
	}
	logger.InfoContext(ctx, "starting", "resilience_mode", cfg.Resilience.Mode.String(), "fleet_breaker", cfg.FleetBreaker,
		"payment_url", redacted(cfg.Payment.BaseURL), "traces", tracingTarget(cfg.Tracing),
		"auth_issuer", cfg.Auth.Issuer, "rate_limit", cfg.RateLimit.Requests, "rate_limit_window", cfg.RateLimit.Window)
	return httpserver.Serve(ctx, httpserver.Config{
		Addr: cfg.HTTPAddr, DebugAddr: cfg.DebugAddr, DrainDelay: cfg.DrainDelay, ReadinessPath: "/ready", ShutdownTimeout: cfg.ShutdownTimeout,
		MetricsAddr: cfg.MetricsAddr, Metrics: telemetry.Handler(reg),
	}, handler, logger)
}

// newPools returns the API pool and the pool /health is served from: its own
// in protected mode, the API's otherwise (the modes of docs/design.md, "Protection stack").
func newPools(cfg config, reg prometheus.Registerer) (apiPool, healthPool func(http.Handler) http.Handler, err error) {
	m, err := httpserver.NewPoolMetrics(reg)
	if err != nil {
		return nil, nil, fmt.Errorf("register metrics: %w", err)
	}
	business, err := httpserver.NewPool("api", cfg.APIPool, m, api.PoolFull)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Resilience.Mode != resilience.ModeProtected {
		return business.Middleware, business.Middleware, nil
	}
	probes, err := httpserver.NewPool("health", cfg.HealthPool, m, api.PoolFull)
	if err != nil {
		return nil, nil, err
	}
	return business.Middleware, probes.Middleware, nil
}

// redacted is a URL fit for logs: credentials in it are masked.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}

// tracingTarget says where spans go, for the start-up log line.
func tracingTarget(c telemetry.TracingConfig) string {
	if c.Exporter != telemetry.ExporterOTLP {
		return "off"
	}
	return redacted(c.Endpoint)
}
