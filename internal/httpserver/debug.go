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
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (DEBUG_ADDR): %w", addr, err)
	}
	srv := &http.Server{Handler: DebugHandler(), ReadHeaderTimeout: 5 * time.Second}
	logger.InfoContext(ctx, "debug listener (pprof)", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("debug listener stopped", "err", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}
