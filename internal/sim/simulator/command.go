package simulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/resilientcheckout/checkout/internal/health"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// WriteTimeout must outlast the slowest answer an experiment scripts (the
// outage scenario adds 10 s of latency, catalog faults seconds); the default
// server limit of 30 s would cut longer injected delays short.
const WriteTimeout = 2 * time.Minute

// Config is the settings every simulator binary has. Each binary reads them
// in its own cmd/*/config.go, by their literal names, beside its own
// settings: the README's tables and the Kubernetes manifests' tests find
// every variable a binary reads there.
type Config struct {
	HTTPAddr string
	LogLevel string
	// DebugAddr is the pprof listener; only a binary that reads DEBUG_ADDR
	// sets it.
	DebugAddr       string
	ShutdownTimeout time.Duration
	Latency         time.Duration
	Jitter          time.Duration
	AdminToken      string
}

// Common returns c; a binary's configuration embeds Config and so hands it
// to Command through this method.
func (c Config) Common() Config { return c }

// Command is a simulator binary: `<name> serve` (the default) runs the
// simulator, `<name> healthcheck` probes a running instance (for container
// healthchecks, as the runtime image has no curl).
type Command[C interface{ Common() Config }] struct {
	// Name is the binary's name, in its logs and errors.
	Name string
	// LoadConfig reads the binary's configuration from getenv.
	LoadConfig func(getenv func(string) string) (C, error)
	// New builds the simulator cfg describes, logging to logger, and returns
	// it with the settings, as slog attributes, that the start-up line names
	// besides latency, jitter and whether an admin token is set.
	New func(cfg C, logger *slog.Logger) (sim http.Handler, settings []any)
}

// Main runs the command with the process's arguments, environment and
// standard streams, and exits 1 on error.
func (c Command[C]) Main() {
	if err := c.Run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, c.Name+":", err)
		os.Exit(1)
	}
}

// Run is main with its dependencies passed in, so tests start the real
// wiring in-process on port :0. It serves until ctx ends or the process gets
// SIGINT or SIGTERM.
func (c Command[C]) Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := c.LoadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	command := "serve"
	if len(args) > 1 {
		command = args[1]
	}
	switch command {
	case "serve":
		return c.serve(ctx, cfg, stdout)
	case "healthcheck":
		return health.Probe(ctx, cfg.Common().HTTPAddr)
	default:
		fmt.Fprintf(stderr, "usage: %s [serve|healthcheck]\n", c.Name)
		return errors.New("unknown command " + command)
	}
}

func (c Command[C]) serve(ctx context.Context, cfg C, stdout io.Writer) error {
	common := cfg.Common()
	logger := telemetry.NewLogger(stdout, common.LogLevel, c.Name)
	sim, settings := c.New(cfg, logger)
	attrs := append([]any{"latency", common.Latency, "jitter", common.Jitter}, settings...)
	logger.InfoContext(ctx, "starting", append(attrs, "admin_token", common.AdminToken != "")...)
	return httpserver.Serve(ctx, httpserver.Config{
		Addr:            common.HTTPAddr,
		DebugAddr:       common.DebugAddr,
		ShutdownTimeout: common.ShutdownTimeout,
		WriteTimeout:    WriteTimeout,
	}, sim, logger)
}
