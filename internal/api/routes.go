package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// routes is the one place that lists every endpoint of the checkout API.
func routes(d Deps) http.Handler {
	r := chi.NewRouter()
	r.Method(http.MethodGet, "/health", health.Liveness())
	r.Method(http.MethodGet, "/ready", health.Readiness(readyTimeout, map[string]health.Check{"database": d.Database}))
	r.Method(http.MethodGet, "/metrics", telemetry.Handler(d.Metrics))
	return r
}
