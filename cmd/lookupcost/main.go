// Command lookupcost measures the two designs for settling an unknown charge outcome —
// create and confirm in one request with the list as the lookup, or create, store the id,
// confirm, with a retrieve as the lookup — against the real paymentsim binary
// (internal/lab/lookupcost; `make experiment-lookup` runs it). It prints the table as
// Markdown and writes it to -out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/resilientcheckout/checkout/internal/lab/lookupcost"
)

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lookupcost:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := lookupcost.DefaultConfig()
	exe, _ := os.Executable()
	fs := flag.NewFlagSet("lookupcost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Paymentsim, "paymentsim", filepath.Join(filepath.Dir(exe), "paymentsim"), "the paymentsim binary")
	fs.StringVar(&cfg.DatabaseURL, "database-url", getenv("DATABASE_URL"), "a PostgreSQL database whose role may create databases (default $DATABASE_URL)")
	out := fs.String("out", "results/lookupcost.md", "write the table here too (empty: stdout only)")
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "orders a second")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "the healthy and rate-limited loads")
	fs.DurationVar(&cfg.OutageLoad, "outage-load", cfg.OutageLoad, "the seed outage's load")
	fs.DurationVar(&cfg.HangAt, "hang-at", cfg.HangAt, "when into the outage's load the provider hangs")
	fs.DurationVar(&cfg.HangFor, "hang-for", cfg.HangFor, "how long it hangs")
	fs.IntVar(&cfg.RateLimit, "rate-limit", cfg.RateLimit, "the provider's rate limit in the rate-limited scenario, requests a second")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "each provider request's timeout")
	fs.IntVar(&cfg.Settlers, "settlers", cfg.Settlers, "lookups at once when settling")
	if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return errors.New("no database: set -database-url or DATABASE_URL")
	}
	cfg.Progress = stderr
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		cfg.LogDir = filepath.Dir(*out)
	}

	report, err := lookupcost.Run(ctx, cfg)
	if err != nil {
		return err
	}
	var b strings.Builder
	if err := report.WriteMarkdown(&b); err != nil {
		return err
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}
