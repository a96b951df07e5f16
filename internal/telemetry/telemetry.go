// Package telemetry sets up the structured logger and the Prometheus registry
// each binary starts with, so their logs and metrics look the same.
package telemetry

import (
	"io"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Levels are the accepted LOG_LEVEL values.
var Levels = []string{"debug", "info", "warn", "error"}

// NewLogger returns a JSON logger tagged with the service name. level is one
// of Levels; anything else means info.
func NewLogger(w io.Writer, level, service string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})).With("service", service)
}

// NewRegistry returns a registry with the Go runtime and process collectors.
// Each process gets its own registry rather than the global default one, so
// tests can run several binaries in one process without name clashes.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves reg in the Prometheus exposition format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
