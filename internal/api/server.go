// Package api is checkout's HTTP layer: it routes requests, maps domain
// errors to RFC 9457 problem responses, and keeps probes isolated from
// business traffic. Business rules live in internal/order; this package only
// translates between HTTP and them.
package api

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/resilientcheckout/checkout/internal/health"
)

// Deps is everything the server needs; cmd/checkout builds it.
type Deps struct {
	Logger   *slog.Logger
	Metrics  *prometheus.Registry
	Database health.Check // readiness: can we accept orders durably?
}

// NewServer returns checkout's root handler.
func NewServer(d Deps) http.Handler {
	return routes(d)
}

// readyTimeout keeps /ready under the 2 s probe timeout orchestrators use by
// default, even when the database hangs instead of refusing connections.
const readyTimeout = time.Second
