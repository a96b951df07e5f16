package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// DebugHandler serves Go's profiles (net/http/pprof) under /debug/pprof/.
// It is never mounted on a public port: profiles reveal code paths and
// memory contents, and a CPU profile costs the process while it runs.
func DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveDebug runs DebugHandler on addr until ctx is done. Profiles take as
// long as they are asked for (seconds=30), so it has no write timeout.
func serveDebug(ctx context.Context, addr string, logger *slog.Logger) (stop func(), err error) {
	srv := &http.Server{Handler: DebugHandler(), ReadHeaderTimeout: 5 * time.Second}
	return serveSide(ctx, srv, addr, "DEBUG_ADDR", "debug listener (pprof)", logger)
}

// serveMetrics runs handler (a Prometheus handler) on addr, alone: a
// listener that serves nothing else can be opened to the monitoring system
// and to no one else.
func serveMetrics(ctx context.Context, addr string, handler http.Handler, logger *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	return serveSide(ctx, srv, addr, "METRICS_ADDR", "metrics listener", logger)
}

// serveSide runs srv on a listener of its own beside the main one; variable
// names the setting addr comes from, for the error when it cannot listen.
// It logs msg rather than "listening", the line tests read the main
// listener's address from.
func serveSide(ctx context.Context, srv *http.Server, addr, variable, msg string, logger *slog.Logger) (stop func(), err error) {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (%s): %w", addr, variable, err)
	}
	logger.InfoContext(ctx, msg, "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Warn(msg+" stopped", "err", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}
