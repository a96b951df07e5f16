// Package api is checkout's HTTP layer: it routes requests (routes.go),
// decodes order documents strictly (decode.go), renders what
// internal/order returns — the first time and on replay — (orders.go), maps
// domain errors to RFC 9457 problem responses, the only place problems are
// written (problem.go), and keeps probes isolated from business traffic.
// Business rules live in internal/order; this package only translates
// between HTTP and them.
package api

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// Deps is everything the server needs; cmd/checkout builds it.
type Deps struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Metrics  *Metrics
	Orders   *order.Service
	Database health.Check // readiness: can we accept orders durably?
	// APIPool bounds concurrent business requests; HealthPool serves
	// /health. In protected mode they are separate pools, so a saturated
	// API cannot delay liveness; in modes none and timeout cmd/checkout
	// passes the API pool for both, to show what happens without isolation.
	APIPool, HealthPool func(http.Handler) http.Handler
	// TracerProvider makes the server spans (telemetry.HTTPHandler); nil
	// means OpenTelemetry's global provider.
	TracerProvider trace.TracerProvider
	// MetricsElsewhere leaves /metrics off this handler: cmd/checkout then
	// serves Registry on a listener of its own (METRICS_ADDR), which a
	// network policy can open to the monitoring system alone.
	MetricsElsewhere bool
	// Authenticator turns authentication on for the business routes
	// (docs/design.md, "Authentication"); nil leaves it off.
	Authenticator Authenticator
	// RateLimit limits each client's business requests; nil: no limit.
	RateLimit *RateLimit
}

// NewServer returns checkout's root handler: the routes inside a server
// span per request, named after the route once it is matched.
func NewServer(d Deps) http.Handler {
	return telemetry.HTTPHandler(routes(d), d.TracerProvider, "checkout")
}

// readyTimeout keeps /ready under the 2 s probe timeout orchestrators use by
// default, even when the database hangs instead of refusing connections.
const readyTimeout = time.Second
