package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// routes is the one place that lists every endpoint of the checkout API.
func routes(d Deps) http.Handler {
	r := chi.NewRouter()
	// GetHead serves HEAD from the GET routes (net/http drops the body).
	r.Use(requestID, telemetry.SpanRouteName, observe(d.Logger, d.Metrics), recoverPanic(d.Logger), middleware.GetHead)
	r.NotFound(notFound)
	r.MethodNotAllowed(methodNotAllowed)

	// Liveness from its own pool; it touches no dependency.
	r.With(d.HealthPool).Method(http.MethodGet, "/health", health.Liveness())
	// Readiness and metrics are cheap, infrequent, and must work while the
	// API pool is saturated, so they take no pool slot.
	r.Method(http.MethodGet, "/ready", health.Readiness(readyTimeout, map[string]health.Check{"database": d.Database}))
	if !d.MetricsElsewhere {
		r.Method(http.MethodGet, "/metrics", telemetry.Handler(d.Registry))
	}

	r.Group(func(r chi.Router) {
		// Outermost, before any layer that costs a pool slot, a database
		// call or a provider call: the client's rate limit, keyed by the
		// customer of a valid token, else by address. Checking a token
		// with a cached key is CPU only, so it comes first and answers
		// nothing until the limit has had its say.
		if d.Authenticator != nil {
			r.Use(authenticate(d.Authenticator))
		}
		if d.RateLimit != nil {
			r.Use(clientAddr(d.RateLimit.TrustedProxies), rateLimit(*d.RateLimit))
		}
		if d.Authenticator != nil {
			r.Use(requireCustomer(d.Logger))
		}
		r.Use(d.APIPool)
		r.Method(http.MethodPost, "/orders", placeOrder(d.Orders, d.Metrics, d.Logger))
		r.Method(http.MethodGet, "/orders/{id}", getOrder(d.Orders, d.Logger))
	})
	return r
}
