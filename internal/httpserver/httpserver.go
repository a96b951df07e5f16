// Package httpserver runs an http.Handler with the timeouts and graceful
// shutdown every binary of the project needs, so each cmd/*/main.go stays a
// thin piece of wiring.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Config holds the server's limits. Zero values get the defaults below.
type Config struct {
	Addr string
	// ShutdownTimeout bounds how long in-flight requests may finish after
	// the process is asked to stop (Kubernetes sends SIGKILL 30 s after
	// SIGTERM by default; 10 s leaves room for the rest of the shutdown).
	ShutdownTimeout time.Duration
	// WriteTimeout must exceed the slowest legitimate response; handlers
	// enforce their own, tighter deadlines.
	WriteTimeout time.Duration
}

// Serve listens on cfg.Addr, logs the bound address (tests start servers on
// ":0" and read it from the log), and serves until ctx is done. It then stops
// accepting connections and waits up to ShutdownTimeout for in-flight
// requests. It returns nil after a clean shutdown.
func Serve(ctx context.Context, cfg Config, handler http.Handler, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}

	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	srv := &http.Server{
		Handler: handler,
		// Slowloris protection: a client must send its headers promptly.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       60 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	logger.InfoContext(ctx, "listening", "addr", ln.Addr().String())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	logger.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
