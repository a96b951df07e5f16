// Command experiment drives the outage scenario (docs/design.md, "Experiment") against a running stack and
// reports it: a Markdown table on stdout, and optionally the run as JSON and an SVG timeline.
// `experiment ramp` runs the ramp of the same section instead: the provider healthy, checkout from 10 to
// 80 req/s over 20 s, to watch the concurrency limit track rate × latency. `experiment
// catalog-outage` faults the product catalog instead (catalogsim down for 10 s after a 5 s
// warm-up, checkout answering from its stale price cache), and `experiment catalog-cold` takes
// the catalog down from t=0 against a cold cache. `experiment report FILE...` combines JSON
// reports of several runs into one Markdown table, and `experiment matrix FILE...` the runs of
// the scenario matrix (scripts/experiment-matrix) into its table. `experiment derive` prints
// the payment settings derived from a log-normal provider latency, as the matrix's
// slow-provider row runs them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/resilientcheckout/checkout/internal/lab/experiment"
)

func main() {
	err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "experiment:", err)
	// A refused run gets its own exit status, so a script may try it again on a quieter machine.
	if _, late := errors.AsType[*experiment.ScheduleError](err); late {
		os.Exit(exitBehindSchedule)
	}
	os.Exit(1)
}

// exitBehindSchedule is the exit status of a run refused because its load went out late.
const exitBehindSchedule = 3

// run is main with its dependencies passed in, so tests can call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := experiment.DefaultConfig()
	if len(args) > 1 {
		switch args[1] {
		case "report":
			return combine(args[2:], stdout)
		case "matrix":
			return matrix(args[2:], stdout, stderr)
		case "derive":
			return derive(args[2:], stdout, stderr)
		case "run":
			args = args[1:]
		case "ramp":
			cfg = experiment.RampConfig()
			args = args[1:]
		case "recovery":
			cfg = experiment.RecoveryConfig()
			args = args[1:]
		case "catalog-outage":
			cfg = experiment.CatalogOutageConfig()
			args = args[1:]
		case "catalog-cold":
			cfg = experiment.CatalogColdStartConfig()
			args = args[1:]
		}
	}
	return scenario(ctx, cfg, args[1:], getenv, stdout, stderr)
}

// scenario runs one scenario, cfg as changed by the flags.
func scenario(ctx context.Context, cfg experiment.Config, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var jsonPath, svgPath, recoverySVGPath string
	fs := flag.NewFlagSet("experiment", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: experiment [run|ramp|recovery|catalog-outage|catalog-cold] [flags]\n       experiment report FILE.json...\n"+
			"       experiment matrix [-json FILE] FILE.json...\n       experiment derive [-note] -median D -sigma S -rate R\n\n"+
			"run (the default) is the provider outage, ramp the healthy 10 → 80 req/s ramp, catalog-outage the catalog down for 10 s\n"+
			"after a 5 s warm-up (25 s in all), catalog-cold the catalog down from t=0 against a cold cache (both need -catalog); the flags'\n"+
			"defaults are the chosen scenario's.\n\nflags:")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.CheckoutURL, "checkout", "http://localhost:8080", "checkout API base `URL`, or several separated by commas (round-robin)")
	fs.StringVar(&cfg.SimulatorURL, "simulator", "http://localhost:8082", "paymentsim base `URL` (its admin API)")
	fs.StringVar(&cfg.SimulatorToken, "simulator-token", getenv("PAYMENTSIM_ADMIN_TOKEN"), "paymentsim admin bearer `token` (default $PAYMENTSIM_ADMIN_TOKEN)")
	fs.StringVar(&cfg.CatalogURL, "catalog", "", "catalogsim base `URL` when checkout checks prices against it (CATALOG_URL): orders then buy its SKUs at its prices")
	fs.StringVar(&cfg.CatalogToken, "catalog-token", getenv("CATALOGSIM_ADMIN_TOKEN"), "catalogsim admin bearer `token` (default $CATALOGSIM_ADMIN_TOKEN)")
	fs.Func("fault-target", "dependency the fault is scripted on: payment or catalog (default payment; catalog for the catalog scenarios)", func(s string) error {
		cfg.FaultTarget = experiment.Target(s)
		return nil
	})
	fs.StringVar(&cfg.WorkerURL, "worker", "", "worker base `URL`, or several separated by commas: the recovery figures then sample the workers' payment limits and the slots of them taken")
	fs.StringVar(&cfg.DatabaseURL, "database", getenv("DATABASE_URL"), "checkout's PostgreSQL `URL`, for the audit (default $DATABASE_URL)")
	fs.StringVar(&cfg.Label, "label", "", "name of the run in reports, e.g. the resilience mode under test")
	fs.StringVar(&cfg.Row, "row", getenv("EXPERIMENT_ROW"), "the scenario-matrix `row` the run belongs to (default $EXPERIMENT_ROW)")
	fs.StringVar(&cfg.Note, "note", getenv("EXPERIMENT_NOTE"), "what the scenario matrix says about the run's row, e.g. the settings it derived (default $EXPERIMENT_NOTE)")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "checkout requests per second (at the start, for a ramp)")
	fs.Float64Var(&cfg.RateTo, "rate-to", cfg.RateTo, "ramp the rate linearly to this many requests per second at the end (0: constant rate)")
	fs.Float64Var(&cfg.RateAfter, "rate-after", cfg.RateAfter, "requests per second from the end of the fault on (0: -rate throughout)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long load and probes run")
	fs.DurationVar(&cfg.OutageStart, "outage-start", cfg.OutageStart, "when the fault begins, from the start")
	fs.DurationVar(&cfg.OutageFor, "outage-for", cfg.OutageFor, "how long the fault lasts")
	fs.Func("fault", "fault: latency, down, hang, brownout, errors (the last three provider only) or none (default latency; none for the ramp; down for the catalog scenarios)", func(s string) error {
		cfg.Fault = experiment.FaultKind(s)
		return nil
	})
	fs.DurationVar(&cfg.OutageLatency, "outage-latency", cfg.OutageLatency, "latency the faulted dependency adds during a latency fault")
	fs.Float64Var(&cfg.LatencyFactor, "latency-factor", 5, "how many times slower every charge is during a brownout")
	fs.Float64Var(&cfg.ErrorRate, "error-rate", 0.5, "share of charges answered -error-status during an errors fault")
	fs.IntVar(&cfg.ErrorStatus, "error-status", 503, "HTTP status of the charges an errors fault answers")
	fs.IntVar(&cfg.Repeat, "repeat", 1, "how many times the fault comes, every -repeat-every (a flapping provider)")
	fs.DurationVar(&cfg.RepeatEvery, "repeat-every", 0, "period of a repeated fault, longer than -outage-for")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout, "when a checkout client gives up")
	fs.DurationVar(&cfg.HealthInterval, "health-interval", cfg.HealthInterval, "time between /health probes")
	fs.DurationVar(&cfg.HealthTimeout, "health-timeout", cfg.HealthTimeout, "when a /health probe gives up")
	fs.DurationVar(&cfg.MetricsInterval, "metrics-interval", cfg.MetricsInterval, "time between reads of checkout's /metrics for the breaker state")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long to wait for the worker to settle every order")
	fs.DurationVar(&cfg.MaxLag, "max-lag", cfg.MaxLag, "refuse the run when a request went out later than this")
	fs.DurationVar(&cfg.LiveAfter, "live-after", cfg.LiveAfter, "orders sent this long after the fault ended count as live in the recovery figures")
	fs.DurationVar(&cfg.ProviderLatency, "provider-latency", cfg.ProviderLatency, "the healthy provider's latency (PAYMENTSIM_LATENCY), for the ideal drain time; 0: not reported")
	fs.StringVar(&jsonPath, "json", "", "write the report as JSON to this `file`")
	fs.StringVar(&svgPath, "svg", "", "write the SVG timeline to this `file`")
	fs.StringVar(&recoverySVGPath, "recovery-svg", "", "write the recovery figures (backlog, charges begun, provider in flight) as SVG to this `file`, for a run that faults the provider")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))

	report, err := experiment.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if jsonPath != "" {
		if err := writeJSON(jsonPath, report); err != nil {
			return err
		}
	}
	if svgPath != "" {
		if err := writeFile(svgPath, func(w io.Writer) error { return experiment.WriteSVG(w, report) }); err != nil {
			return err
		}
	}
	if recoverySVGPath != "" && report.Recovery != nil {
		if err := writeFile(recoverySVGPath, func(w io.Writer) error { return experiment.WriteRecoverySVG(w, report) }); err != nil {
			return err
		}
	}
	return experiment.WriteMarkdown(stdout, report)
}

// combine prints one Markdown table for the JSON reports in paths.
func combine(paths []string, stdout io.Writer) error {
	reports, err := readReports(paths)
	if err != nil {
		return err
	}
	return experiment.WriteMarkdown(stdout, reports...)
}

// readReports reads the JSON reports in paths.
func readReports(paths []string) ([]experiment.Report, error) {
	if len(paths) == 0 {
		return nil, errors.New("usage: experiment report|matrix FILE.json [FILE.json …]")
	}
	reports := make([]experiment.Report, len(paths))
	for i, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &reports[i]); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return reports, nil
}

// matrix prints the scenario matrix of the JSON reports in args, optionally writing its lines
// as JSON too. It fails, after printing, when a run broke an invariant.
func matrix(args []string, stdout, stderr io.Writer) error {
	var jsonPath string
	fs := flag.NewFlagSet("experiment matrix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&jsonPath, "json", "", "write the matrix's lines as JSON to this `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	reports, err := readReports(fs.Args())
	if err != nil {
		return err
	}
	lines := experiment.NewMatrix(reports)
	if jsonPath != "" {
		if err := writeJSON(jsonPath, lines); err != nil {
			return err
		}
	}
	if err := experiment.WriteMatrix(stdout, lines); err != nil {
		return err
	}
	if broken := experiment.BrokenRuns(lines); len(broken) > 0 {
		return fmt.Errorf("%d runs lost an order or charged one twice; see the table", len(broken))
	}
	return nil
}

// derive prints the payment settings derived from a log-normal latency, one environment
// assignment a line, or with -note the sentence that explains them.
func derive(args []string, stdout, stderr io.Writer) error {
	var (
		median      time.Duration
		sigma, rate float64
		note        bool
	)
	fs := flag.NewFlagSet("experiment derive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&median, "median", 0, "the provider's median latency")
	fs.Float64Var(&sigma, "sigma", 0, "σ of the latency's logarithm")
	fs.Float64Var(&rate, "rate", 0, "requests per second")
	fs.BoolVar(&note, "note", false, "print how the settings were derived instead")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if median <= 0 || sigma <= 0 || rate <= 0 {
		return errors.New("derive needs a positive -median, -sigma and -rate")
	}
	s := experiment.DeriveSettings(median, sigma, rate)
	if note {
		_, err := fmt.Fprintln(stdout, s.Note(median, sigma, rate))
		return err
	}
	_, err := fmt.Fprintln(stdout, strings.Join(s.Env(), "\n"))
	return err
}

// writeJSON writes v to path as indented JSON.
func writeJSON(path string, v any) error {
	return writeFile(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	})
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
