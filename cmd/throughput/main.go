// Command throughput measures the real binaries' order rate against a
// one-transaction baseline (internal/lab/throughput; `make bench` runs it on a
// PostgreSQL of its own). `throughput baseline` is that baseline server.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/lab/throughput"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(1)
	}
}

const usage = `usage: throughput [run] [flags]   measure (see -h)
       throughput baseline          serve the baseline (DATABASE_URL, HTTP_ADDR, BASELINE_MODE)`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	command, rest := "run", args[1:]
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		command, rest = rest[0], rest[1:]
	}
	switch command {
	case "run":
		return measure(ctx, rest, getenv, stdout, stderr)
	case "baseline":
		return baseline(ctx, getenv, stdout)
	default:
		fmt.Fprintln(stderr, usage)
		return errors.New("unknown command " + command)
	}
}

// listFlag is a repeatable KEY=VALUE flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func measure(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg := throughput.DefaultConfig()
	exe, _ := os.Executable()
	fs := flag.NewFlagSet("throughput", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.DatabaseURL, "database-url", "", "maintenance database of the PostgreSQL under test, superuser, on this machine (default $DATABASE_URL)")
	fs.StringVar(&cfg.Bin, "bin", filepath.Dir(exe), "directory holding the checkout, worker, paymentsim and throughput binaries")
	fs.StringVar(&cfg.Wrk, "wrk", cfg.Wrk, "wrk binary")
	fs.StringVar(&cfg.WorkDir, "logs", "", "directory for the processes' logs (default: a temporary directory, removed)")
	fs.StringVar(&cfg.Baseline, "baseline", cfg.Baseline, "how the baseline writes: "+strings.Join(throughput.BaselineModes, " or ")+" (see internal/lab/throughput/baseline.go)")
	fs.IntVar(&cfg.Runs, "runs", cfg.Runs, "interleaved pairs (baseline, checkout)")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "warm-up before each measured load (whole seconds)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured load per run (whole seconds)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "wrk's per-request timeout; a slower answer refuses the run (whole seconds)")
	fs.IntVar(&cfg.Threads, "threads", cfg.Threads, "wrk threads")
	fs.IntVar(&cfg.Connections, "connections", cfg.Connections, "wrk connections (requests in flight)")
	fs.Var((*listFlag)(&cfg.CheckoutEnv), "checkout-env", "extra KEY=VALUE for checkout (repeatable)")
	fs.Var((*listFlag)(&cfg.WorkerEnv), "worker-env", "extra KEY=VALUE for the worker (repeatable)")
	fs.BoolVar(&cfg.Statements, "statements", false, "per-statement accounting from pg_stat_statements (the server must preload it)")
	jsonPath := fs.String("json", "", "write the report as JSON to this file")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = getenv("DATABASE_URL")
	}
	cfg.Progress = stderr

	report, err := throughput.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *jsonPath != "" {
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return report.WriteMarkdown(stdout)
}

// baseline serves throughput.NewBaseline with a pool of
// throughput.BaselinePoolSize connections and an insert-only River client.
func baseline(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	env := envconfig.New(getenv)
	addr := env.Addr("HTTP_ADDR", ":8090")
	mode := env.OneOf("BASELINE_MODE", throughput.BaselineInsertTx, throughput.BaselineModes...)
	db := database.Config{
		URL:              env.URL("DATABASE_URL", envconfig.DefaultDatabaseURL, "postgres", "postgresql"),
		MaxConns:         throughput.BaselinePoolSize,
		ConnectTimeout:   time.Second,
		StatementTimeout: 2 * time.Second, // as checkout's
	}
	if err := env.Err(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := telemetry.NewLogger(stdout, "info", "baseline")
	pool, err := database.Open(ctx, db)
	if err != nil {
		return err
	}
	defer pool.Close()
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return err
	}
	return httpserver.Serve(ctx, httpserver.Config{Addr: addr}, throughput.NewBaseline(pool, jobs, mode), logger)
}
