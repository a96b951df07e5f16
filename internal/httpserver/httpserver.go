// Package httpserver runs an http.Handler with the timeouts and graceful
// shutdown every binary of the project needs, so each cmd/*/main.go stays a
// thin piece of wiring, and bounds how many requests a group of routes
// serves at once (Pool).
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/resilientcheckout/checkout/internal/health"
)

// DefaultDrainDelay is the drain the binaries use unless SHUTDOWN_DRAIN_DELAY
// says otherwise. Kubernetes puts no bound on how late kube-proxy and
// ingress controllers learn that a pod is terminating (the usual advice, a
// preStop sleep, is 5–15 s); a load balancer that follows the readiness
// probe notices after period × failureThreshold, 2 s × 2 in deploy/k8s.
// 5 s covers the probe with a margin. Cloud load balancers that deregister
// targets slowly need more, and a longer grace period with it.
const DefaultDrainDelay = 5 * time.Second

// Config holds the server's limits. Zero values get the defaults below.
type Config struct {
	Addr string
	// DrainDelay is how long the server goes on serving after ctx is done,
	// with ReadinessPath answering 503, before it stops accepting
	// connections. Kubernetes takes a terminating pod out of its Services'
	// endpoints when it sends SIGTERM, but kube-proxy on every node,
	// ingress controllers and load balancers that probe /ready learn of it
	// seconds later; a server that closed its listener at once would
	// refuse the requests they still send it. Zero shuts down at once.
	DrainDelay time.Duration
	// ReadinessPath is the path of the readiness probe. While the server
	// drains it answers 503 there itself, whatever the handler would say.
	ReadinessPath string
	// ShutdownTimeout bounds how long in-flight requests may finish once
	// the drain is over. An orchestrator's grace period (Kubernetes:
	// terminationGracePeriodSeconds, 30 s by default) must cover
	// DrainDelay + ShutdownTimeout, or the process is killed mid-request.
	ShutdownTimeout time.Duration
	// WriteTimeout must exceed the slowest legitimate response; handlers
	// enforce their own, tighter deadlines.
	WriteTimeout time.Duration
	// DebugAddr, when set, is a second listener serving pprof (DebugHandler),
	// e.g. 127.0.0.1:6060 (DEBUG_ADDR). Empty: no profiling endpoint at all.
	DebugAddr string
	// MetricsAddr, when set, is a second listener serving Metrics at
	// /metrics and nothing else (METRICS_ADDR), so that a network policy
	// can open it to the monitoring system alone. It keeps serving while
	// the main listener drains, so the last scrapes see the shutdown.
	// The handler passed to Serve must then not serve /metrics itself.
	MetricsAddr string
	Metrics     http.Handler
}

// Serve listens on cfg.Addr, logs the bound address (tests start servers on
// ":0" and read it from the log), and serves until ctx is done. It then
// drains for cfg.DrainDelay, stops accepting connections and waits up to
// cfg.ShutdownTimeout for in-flight requests. It returns nil after a clean
// shutdown.
func Serve(ctx context.Context, cfg Config, handler http.Handler, logger *slog.Logger) error {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	if cfg.DebugAddr != "" {
		stop, err := serveDebug(ctx, cfg.DebugAddr, logger)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer stop()
	}
	if cfg.MetricsAddr != "" {
		stop, err := serveMetrics(ctx, cfg.MetricsAddr, cfg.Metrics, logger)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer stop()
	}
	return serve(ctx, ln, cfg, handler, logger)
}

func serve(ctx context.Context, ln net.Listener, cfg Config, handler http.Handler, logger *slog.Logger) error {
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	var draining atomic.Bool
	if cfg.ReadinessPath != "" {
		handler = failReadinessWhile(&draining, cfg.ReadinessPath, handler)
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

	if cfg.DrainDelay > 0 {
		draining.Store(true)
		// Without keep-alives each response closes its connection, so a
		// client holding one open reconnects through the load balancer,
		// which by now may send it elsewhere.
		srv.SetKeepAlivesEnabled(false)
		logger.Info("draining: readiness fails, requests are still served", "delay", cfg.DrainDelay)
		timer := time.NewTimer(cfg.DrainDelay)
		select {
		case err := <-errc:
			timer.Stop()
			return fmt.Errorf("serve: %w", err)
		case <-timer.C:
		}
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

// failReadinessWhile answers path with health.ShuttingDown while draining
// is set, and passes every request to next otherwise.
func failReadinessWhile(draining *atomic.Bool, path string, next http.Handler) http.Handler {
	shuttingDown := health.ShuttingDown()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path && draining.Load() {
			shuttingDown.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
