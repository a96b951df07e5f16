// Command devissuer serves a development OpenID Connect issuer
// (internal/sim/devissuer) for the compose demo and `make run`. It is NOT
// an identity provider: it hands a signed token for any customer to anyone
// who asks, so it listens on loopback unless told otherwise.
// `devissuer healthcheck` probes a running instance (for container
// healthchecks, as the runtime image has no curl).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/sim/devissuer"
)

func main() {
	if err := run(context.Background(), os.Args, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "devissuer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	addr := or(getenv("DEVISSUER_ADDR"), "127.0.0.1:8084")
	switch {
	case len(args) > 1 && args[1] == "healthcheck":
		return health.Probe(ctx, addr)
	case len(args) > 1 && args[1] != "serve":
		return fmt.Errorf("unknown command %q; usage: devissuer [serve|healthcheck]", args[1])
	}
	issuer, err := devissuer.New(devissuer.Config{
		Issuer:   or(getenv("DEVISSUER_ISSUER"), "http://"+addr),
		Audience: or(getenv("DEVISSUER_AUDIENCE"), "checkout"),
	})
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	log.Warn("development issuer: signs a token for any customer on request; never use it in production", "addr", ln.Addr().String())
	srv := &http.Server{Handler: issuer.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
