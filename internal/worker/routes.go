package worker

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// RoutesConfig is what the worker's HTTP server needs.
type RoutesConfig struct {
	Database health.Check // readiness
	Registry *prometheus.Registry
	UI       http.Handler
	// RiverUIUser and RiverUIPassword guard River UI with basic auth: it
	// can cancel, retry and delete jobs. Empty: no auth (local demo only).
	RiverUIUser, RiverUIPassword string
	// TracerProvider makes the server spans (telemetry.HTTPHandler); nil
	// means OpenTelemetry's global provider.
	TracerProvider trace.TracerProvider
}

// Routes lists every endpoint of the worker's HTTP server.
func Routes(c RoutesConfig) http.Handler {
	r := chi.NewRouter()
	r.Use(telemetry.SpanRouteName)
	r.Method(http.MethodGet, "/health", health.Liveness())
	r.Method(http.MethodGet, "/ready", health.Readiness(time.Second, map[string]health.Check{"database": c.Database}))
	r.Method(http.MethodGet, "/metrics", telemetry.Handler(c.Registry))
	r.Group(func(r chi.Router) {
		if c.RiverUIUser != "" {
			r.Use(middleware.BasicAuth("River UI", map[string]string{c.RiverUIUser: c.RiverUIPassword}))
		}
		r.Mount("/riverui", c.UI)
	})
	return telemetry.HTTPHandler(r, c.TracerProvider, "worker")
}
