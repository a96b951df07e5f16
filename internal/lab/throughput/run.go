// Package throughput measures what the deployed binaries sustain: the real
// checkout, worker and paymentsim processes (a provider answering at once)
// against a one-transaction baseline server on the same PostgreSQL, under a
// closed-loop wrk load, in interleaved runs. Each run gets a fresh database
// cloned from one migrated template, and is accounted per order: rate,
// latency, CPU per process from /proc, WAL and commits from pg_stat_wal and
// pg_stat_database. A run with any non-2xx answer or socket error is refused,
// not reported. cmd/throughput is the command line; scripts/throughput starts
// a PostgreSQL at default settings for it.
package throughput

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	labprocess "github.com/resilientcheckout/checkout/internal/lab/process"
)

// Variants, in the order each pair runs them.
const (
	VariantBaseline = "baseline"
	VariantCheckout = "checkout"
)

// Config is one throughput measurement.
type Config struct {
	// DatabaseURL is a maintenance database of the cluster under test (a
	// superuser role: the tool creates databases and checkpoints). The
	// cluster must run on this machine.
	DatabaseURL string
	// Bin holds the checkout, worker, paymentsim and throughput binaries.
	Bin string
	// Wrk is the wrk binary.
	Wrk string
	// WorkDir receives each process's log; empty means a temporary
	// directory, removed afterwards.
	WorkDir string

	// Baseline is the baseline's mode, one of BaselineModes.
	Baseline string

	Runs        int // pairs: baseline, checkout, baseline, checkout, …
	Warmup      time.Duration
	Duration    time.Duration
	Threads     int
	Connections int
	Timeout     time.Duration // wrk's per-request timeout

	// CheckoutEnv and WorkerEnv are extra KEY=VALUE settings for those
	// processes (e.g. API_POOL_SIZE=64), recorded in the report.
	CheckoutEnv, WorkerEnv []string

	// Statements adds pg_stat_statements' per-statement accounting to each
	// run; the server must preload the library.
	Statements bool

	// Progress receives one line per step; nil discards them.
	Progress io.Writer
}

// DefaultConfig is the throughput measurement: wrk -t2 -c32, 10 s
// after a 2 s warm-up, three interleaved pairs.
func DefaultConfig() Config {
	return Config{
		Wrk: "wrk", Baseline: BaselineInsertTx, Runs: 3, Warmup: 2 * time.Second, Duration: 10 * time.Second,
		Threads: 2, Connections: 32, Timeout: 2 * time.Second,
	}
}

func (c Config) validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("a database URL is required"))
	}
	if !slices.Contains(BaselineModes, c.Baseline) {
		errs = append(errs, fmt.Errorf("baseline %q: want one of %v", c.Baseline, BaselineModes))
	}
	if c.Runs < 1 {
		errs = append(errs, errors.New("runs must be at least 1"))
	}
	for name, d := range map[string]time.Duration{"warm-up": c.Warmup, "duration": c.Duration, "timeout": c.Timeout} {
		if d < time.Second || d%time.Second != 0 {
			errs = append(errs, fmt.Errorf("%s %s: wrk takes whole seconds, at least 1 s", name, d))
		}
	}
	if c.Threads < 1 || c.Connections < c.Threads {
		errs = append(errs, fmt.Errorf("threads %d, connections %d: want threads ≥ 1 and connections ≥ threads", c.Threads, c.Connections))
	}
	for _, kv := range append(append([]string{}, c.CheckoutEnv...), c.WorkerEnv...) {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("environment setting %q: want KEY=VALUE", kv))
		}
	}
	return errors.Join(errs...)
}

// Run measures cfg.Runs interleaved pairs and returns the report. It stops
// at the first refused run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	workDir := cfg.WorkDir
	if workDir == "" {
		d, err := os.MkdirTemp("", "throughput-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		workDir = d
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, err
	}

	c, err := openCluster(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer c.close()
	settings, err := c.settings(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.Statements {
		if err := c.enableStatements(ctx); err != nil {
			return nil, err
		}
	}

	r := &runner{cfg: cfg, cluster: c, workDir: workDir, tag: "throughput_" + randomHex(4)}
	template := r.tag + "_template"
	if err := r.migrateTemplate(ctx, template); err != nil {
		return nil, err
	}
	defer func() { _ = c.dropDatabase(context.WithoutCancel(ctx), template) }() // best effort: the cluster is thrown away

	report := &Report{
		StartedAt: time.Now().UTC(),
		Machine:   describeMachine(),
		Postgres:  settings,
		Load: Load{
			Tool: "wrk", Threads: cfg.Threads, Connections: cfg.Connections,
			WarmupSeconds: cfg.Warmup.Seconds(), DurationSeconds: cfg.Duration.Seconds(),
			TimeoutSeconds: cfg.Timeout.Seconds(), Pairs: cfg.Runs,
		},
		Baseline: cfg.Baseline, CheckoutEnv: cfg.CheckoutEnv, WorkerEnv: cfg.WorkerEnv,
	}
	for i := 1; i <= cfg.Runs; i++ {
		for _, variant := range []string{VariantBaseline, VariantCheckout} {
			res, err := r.measure(ctx, variant, i, template)
			if err != nil {
				return report, fmt.Errorf("%s run %d refused: %w", variant, i, err)
			}
			fmt.Fprintf(cfg.Progress, "%-8s %d: %7.0f orders/s  p50 %5.2f ms  p99 %6.2f ms\n",
				variant, i, res.OrdersPerSecond, res.LatencyMS.P50, res.LatencyMS.P99)
			report.Runs = append(report.Runs, res)
		}
	}
	report.Summary = summarize(report.Runs)
	return report, nil
}

type runner struct {
	cfg     Config
	cluster *cluster
	workDir string
	tag     string // unique per invocation: database names and key prefixes
}

func (r *runner) bin(name string) string { return filepath.Join(r.cfg.Bin, name) }

// migrateTemplate applies the schema with the checkout binary's own
// `checkout migrate`, once; every run clones it, so each starts from the
// same empty schema.
func (r *runner) migrateTemplate(ctx context.Context, name string) error {
	if err := r.cluster.createDatabase(ctx, name, ""); err != nil {
		return err
	}
	p, err := os.Create(filepath.Join(r.workDir, "migrate.log"))
	if err != nil {
		return err
	}
	defer p.Close()
	cmd := exec.CommandContext(ctx, r.bin("checkout"), "migrate")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + r.cluster.databaseURL(name)}
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(p.Name())
		return fmt.Errorf("checkout migrate: %w\n%s", err, b)
	}
	return nil
}

// checkoutEnv is checkout's environment in a run: the database, the
// provider, the rate limit off, then the run's own settings, which win
// (os/exec keeps the last of duplicate keys). wrk sends thousands of
// orders a second from one address, which the default per-address limit
// (RATE_LIMIT) would refuse with 429 within the first seconds.
func checkoutEnv(dbURL, payment string, extra []string) []string {
	return append([]string{dbURL, payment, "RATE_LIMIT=0"}, extra...)
}

// stack starts the processes of one variant against database and returns
// them in start order, the one taking the load last.
func (r *runner) stack(ctx context.Context, variant string, run int, database string) ([]*labprocess.Child, error) {
	dbURL := "DATABASE_URL=" + r.cluster.databaseURL(database)
	logPath := func(name string) string {
		return filepath.Join(r.workDir, fmt.Sprintf("%s-%d-%s.log", variant, run, name))
	}
	var ps []*labprocess.Child
	start := func(name, path string, args []string, env ...string) error {
		p, err := labprocess.Launch(ctx, name, path, args, env, logPath(name))
		if err != nil {
			return err
		}
		ps = append(ps, p)
		return nil
	}
	var err error
	switch variant {
	case VariantBaseline:
		err = start("baseline", r.bin("throughput"), []string{"baseline"}, dbURL, "BASELINE_MODE="+r.cfg.Baseline)
	case VariantCheckout:
		// A provider that answers at once: no latency, no jitter.
		err = start("paymentsim", r.bin("paymentsim"), nil, "PAYMENTSIM_LATENCY=0s", "PAYMENTSIM_JITTER=0s")
		if err == nil {
			payment := "STRIPE_API_BASE=" + ps[0].URL
			err = start("worker", r.bin("worker"), nil, append([]string{dbURL, payment}, r.cfg.WorkerEnv...)...)
			if err == nil {
				err = start("checkout", r.bin("checkout"), nil, checkoutEnv(dbURL, payment, r.cfg.CheckoutEnv)...)
			}
		}
	default:
		err = fmt.Errorf("unknown variant %q", variant)
	}
	if err != nil {
		return nil, errors.Join(err, labprocess.StopAll(ps))
	}
	return ps, nil
}

// measure is one run: a fresh database, the variant's processes, a
// checkpoint, the warm-up, the measured load, and the accounting.
func (r *runner) measure(ctx context.Context, variant string, run int, template string) (Result, error) {
	database := fmt.Sprintf("%s_%s_%d", r.tag, variant, run)
	if err := r.cluster.createDatabase(ctx, database, template); err != nil {
		return Result{}, err
	}
	defer func() { _ = r.cluster.dropDatabase(context.WithoutCancel(ctx), database) }() // best effort: the cluster is thrown away

	ps, err := r.stack(ctx, variant, run, database)
	if err != nil {
		return Result{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = labprocess.StopAll(ps)
		}
	}()
	front := ps[len(ps)-1]

	if err := r.cluster.checkpoint(ctx); err != nil {
		return Result{}, err
	}
	if r.cfg.Statements {
		if err := r.cluster.resetStatements(ctx, database); err != nil {
			return Result{}, err
		}
	}
	// Postgres counters cover warm-up and measured load and are divided by
	// the orders in the database: backends flush their statistics up to a
	// second late while busy, completely only when they exit, so the counters
	// are read again once every process is gone.
	pgBefore, err := r.cluster.counters(ctx, database)
	if err != nil {
		return Result{}, err
	}
	load := loadConfig{Wrk: r.cfg.Wrk, Threads: r.cfg.Threads, Connections: r.cfg.Connections, Timeout: r.cfg.Timeout}
	keys := fmt.Sprintf("%s-%s-%d", r.tag, variant, run)
	warm, err := runWrk(ctx, load, r.workDir, front.URL, r.cfg.Warmup, keys+"-warmup")
	if err == nil {
		err = warm.check()
	}
	if err != nil {
		return Result{}, fmt.Errorf("warm-up: %w", err)
	}

	// CPU covers the measured load only: /proc is exact at any moment.
	cpuBefore, err := r.sampleCPU(ps)
	if err != nil {
		return Result{}, err
	}
	res, err := runWrk(ctx, load, r.workDir, front.URL, r.cfg.Duration, keys)
	if err != nil {
		return Result{}, err
	}
	cpuAfter, err := r.sampleCPU(ps)
	if err != nil {
		return Result{}, err
	}
	if err := res.check(); err != nil {
		return Result{}, err
	}
	for _, p := range ps {
		if err := p.Exited(); err != nil {
			return Result{}, err
		}
	}

	stopped = true
	if err := labprocess.StopAll(ps); err != nil {
		return Result{}, err
	}
	if err := r.cluster.awaitNoSessions(ctx, database, 30*time.Second); err != nil {
		return Result{}, err
	}
	pgAfter, err := r.cluster.counters(ctx, database)
	if err != nil {
		return Result{}, err
	}
	// Before the tool's own query below, which pg_stat_statements would list.
	var statements []Statement
	if r.cfg.Statements {
		if statements, err = r.cluster.statements(ctx, database); err != nil {
			return Result{}, err
		}
	}
	statuses, orders, err := r.cluster.orderCounts(ctx, database)
	if err != nil {
		return Result{}, err
	}
	// Invariant 1, as a sanity check of the run: every acknowledged order is stored.
	if acknowledged := warm.Status.Created + warm.Status.Other2xx + res.Status.Created + res.Status.Other2xx; orders < acknowledged {
		return Result{}, fmt.Errorf("%d orders in the database, %d acknowledged", orders, acknowledged)
	}
	result := account(variant, run, res, cpuBefore, cpuAfter, pgAfter.sub(pgBefore), orders, statuses)
	if r.cfg.Statements {
		result.Statements = perOrder(statements, orders)
	}
	return result, nil
}

// cpuSample is every measured process's CPU time at one moment, and the
// machine's.
type cpuSample struct {
	Process map[string]time.Duration // by process name; "postgres" is the whole cluster
	Machine machineCPU
}

func (r *runner) sampleCPU(ps []*labprocess.Child) (cpuSample, error) {
	s := cpuSample{Process: map[string]time.Duration{}}
	var err error
	if s.Machine, err = readMachineCPU("/proc"); err != nil {
		return s, err
	}
	for _, p := range ps {
		if s.Process[p.Name], err = processCPU("/proc", p.PID()); err != nil {
			return s, err
		}
	}
	if s.Process["postgres"], err = treeCPU("/proc", r.cluster.postmaster); err != nil {
		return s, err
	}
	return s, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// describeMachine states where the figures come from.
func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAverageAtStart = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return m
}
