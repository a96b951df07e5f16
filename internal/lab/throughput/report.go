package throughput

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report is a whole measurement: where, how, every run and the medians. It
// is what the JSON file holds.
type Report struct {
	StartedAt   time.Time         `json:"started_at"`
	Machine     Machine           `json:"machine"`
	Postgres    map[string]string `json:"postgres_settings"`
	Load        Load              `json:"load"`
	Baseline    string            `json:"baseline_mode"`
	CheckoutEnv []string          `json:"checkout_env,omitempty"`
	WorkerEnv   []string          `json:"worker_env,omitempty"`
	Runs        []Result          `json:"runs"`
	Summary     Summary           `json:"summary"`
}

// Machine describes the computer the figures come from.
type Machine struct {
	CPUModel           string `json:"cpu_model"`
	CPUs               int    `json:"cpus"`
	Kernel             string `json:"kernel"`
	GoVersion          string `json:"go_version"`
	LoadAverageAtStart string `json:"load_average_at_start"`
}

// Load is the load generator's configuration.
type Load struct {
	Tool            string  `json:"tool"`
	Threads         int     `json:"threads"`
	Connections     int     `json:"connections"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
	TimeoutSeconds  float64 `json:"timeout_seconds"`
	Pairs           int     `json:"pairs"`
}

// Result is one run of one variant.
type Result struct {
	Variant         string  `json:"variant"`
	Run             int     `json:"run"`
	Requests        int64   `json:"requests"`
	Seconds         float64 `json:"seconds"`
	OrdersPerSecond float64 `json:"orders_per_second"`
	// Created counts 201 answers; Other2xx the other 2xx ones (a 202 is an
	// order deferred to the worker: accepted, but not the happy path).
	Created   int64   `json:"created"`
	Other2xx  int64   `json:"other_2xx"`
	LatencyMS Latency `json:"latency_ms"`
	// CPUMSPerOrder is each process's CPU time during the measured load
	// divided by the orders answered in it; "postgres" is the whole
	// cluster, "wrk" the load generator.
	CPUMSPerOrder map[string]float64 `json:"cpu_ms_per_order"`
	// MachineBusy is the share of the machine's CPU time in use during the
	// measured load; OtherCPU the share used by processes outside the run
	// (other work on a shared machine), both of all CPUs.
	MachineBusy float64 `json:"machine_busy"`
	OtherCPU    float64 `json:"other_cpu"`
	// PerOrder is the database's work divided by the orders it holds after
	// the run (warm-up included).
	PerOrder PerOrder `json:"per_order"`
	// Checkpointed says a checkpoint completed during the run (each run
	// starts right after one): pages written after it cost full-page images.
	Checkpointed     bool             `json:"checkpointed"`
	OrdersInDatabase int64            `json:"orders_in_database"`
	OrderStatuses    map[string]int64 `json:"order_statuses"`
	// Statements is pg_stat_statements' view of the run (warm-up included),
	// when Config.Statements is set.
	Statements []Statement `json:"statements,omitempty"`
}

// Latency percentiles, in milliseconds, as wrk measured them.
type Latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// PerOrder is the database's work per order: WAL from pg_stat_wal (the whole
// cluster), commits and rollbacks from pg_stat_database (the run's database).
type PerOrder struct {
	Commits    float64 `json:"commits"`
	Rollbacks  float64 `json:"rollbacks"`
	WALRecords float64 `json:"wal_records"`
	WALFPI     float64 `json:"wal_fpi"`
	WALBytes   float64 `json:"wal_bytes"`
	WALWrites  float64 `json:"wal_writes"`
	WALSyncs   float64 `json:"wal_syncs"`
}

// account turns one run's raw measurements into its result.
func account(variant string, run int, w wrkResult, before, after cpuSample, pg pgDelta, orders int64, statuses map[string]int64) Result {
	res := Result{
		Variant: variant, Run: run, Requests: w.Requests, Seconds: float64(w.DurationUS) / 1e6,
		OrdersPerSecond: w.Rate(), Created: w.Status.Created, Other2xx: w.Status.Other2xx,
		LatencyMS: Latency{
			P50: float64(w.LatencyUS.P50) / 1e3, P90: float64(w.LatencyUS.P90) / 1e3,
			P99: float64(w.LatencyUS.P99) / 1e3, Max: float64(w.LatencyUS.Max) / 1e3,
		},
		CPUMSPerOrder: map[string]float64{}, OrdersInDatabase: orders, OrderStatuses: statuses,
		Checkpointed: pg.Checkpointed,
	}
	ours := w.CPU
	perOrder := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(w.Requests) }
	for name, end := range after.Process {
		used := end - before.Process[name]
		ours += used
		res.CPUMSPerOrder[name] = perOrder(used)
	}
	res.CPUMSPerOrder["wrk"] = perOrder(w.CPU)
	if total := after.Machine.Total - before.Machine.Total; total > 0 {
		busy := after.Machine.Busy - before.Machine.Busy
		res.MachineBusy = float64(busy) / float64(total)
		res.OtherCPU = max(0, float64(busy-ours)/float64(total))
	}
	if orders > 0 {
		n := float64(orders)
		res.PerOrder = PerOrder{
			Commits: float64(pg.Commits) / n, Rollbacks: float64(pg.Rollbacks) / n,
			WALRecords: float64(pg.WALRecords) / n, WALFPI: float64(pg.WALFPI) / n, WALBytes: float64(pg.WALBytes) / n,
			WALWrites: float64(pg.WALWrites) / n, WALSyncs: float64(pg.WALSyncs) / n,
		}
	}
	return res
}

// Summary is the medians over the runs of each variant and the ratio.
type Summary struct {
	Baseline VariantSummary `json:"baseline"`
	Checkout VariantSummary `json:"checkout"`
	// Ratio is the checkout's median rate over the baseline's.
	Ratio float64 `json:"ratio"`
	// PairRatios is checkout/baseline within each interleaved pair, for the
	// spread.
	PairRatios []float64 `json:"pair_ratios"`
	// CPURatio is the baseline's CPU per order over the checkout's (every
	// process of the run, wrk included; medians): the rate ratio a CPU-bound
	// machine would show. It depends less than the rates on how much CPU
	// other work leaves the run. PairCPURatios is the same per pair.
	CPURatio      float64   `json:"cpu_ratio"`
	PairCPURatios []float64 `json:"pair_cpu_ratios"`
}

// totalCPU is a run's CPU per order over all its processes.
func totalCPU(cpu map[string]float64) float64 {
	var t float64
	for _, v := range cpu {
		t += v
	}
	return t
}

// VariantSummary is the median of each figure over one variant's runs (the
// rate also with its range).
type VariantSummary struct {
	Runs            int                `json:"runs"`
	OrdersPerSecond float64            `json:"orders_per_second"`
	MinRate         float64            `json:"orders_per_second_min"`
	MaxRate         float64            `json:"orders_per_second_max"`
	LatencyP50MS    float64            `json:"latency_p50_ms"`
	LatencyP99MS    float64            `json:"latency_p99_ms"`
	CPUMSPerOrder   map[string]float64 `json:"cpu_ms_per_order"`
	PerOrder        PerOrder           `json:"per_order"`
	OtherCPU        float64            `json:"other_cpu"`
}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func medianOf(rs []Result, f func(Result) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs)
}

func summarizeVariant(rs []Result) VariantSummary {
	if len(rs) == 0 {
		return VariantSummary{}
	}
	s := VariantSummary{
		Runs:            len(rs),
		OrdersPerSecond: medianOf(rs, func(r Result) float64 { return r.OrdersPerSecond }),
		MinRate:         rs[0].OrdersPerSecond, MaxRate: rs[0].OrdersPerSecond,
		LatencyP50MS:  medianOf(rs, func(r Result) float64 { return r.LatencyMS.P50 }),
		LatencyP99MS:  medianOf(rs, func(r Result) float64 { return r.LatencyMS.P99 }),
		OtherCPU:      medianOf(rs, func(r Result) float64 { return r.OtherCPU }),
		CPUMSPerOrder: map[string]float64{},
		PerOrder: PerOrder{
			Commits:    medianOf(rs, func(r Result) float64 { return r.PerOrder.Commits }),
			Rollbacks:  medianOf(rs, func(r Result) float64 { return r.PerOrder.Rollbacks }),
			WALRecords: medianOf(rs, func(r Result) float64 { return r.PerOrder.WALRecords }),
			WALFPI:     medianOf(rs, func(r Result) float64 { return r.PerOrder.WALFPI }),
			WALBytes:   medianOf(rs, func(r Result) float64 { return r.PerOrder.WALBytes }),
			WALWrites:  medianOf(rs, func(r Result) float64 { return r.PerOrder.WALWrites }),
			WALSyncs:   medianOf(rs, func(r Result) float64 { return r.PerOrder.WALSyncs }),
		},
	}
	for _, r := range rs {
		s.MinRate, s.MaxRate = min(s.MinRate, r.OrdersPerSecond), max(s.MaxRate, r.OrdersPerSecond)
		for name := range r.CPUMSPerOrder {
			s.CPUMSPerOrder[name] = medianOf(rs, func(r Result) float64 { return r.CPUMSPerOrder[name] })
		}
	}
	return s
}

// summarize computes the medians and the ratios. Runs come in pairs,
// baseline first, as Run measures them.
func summarize(runs []Result) Summary {
	var base, check []Result
	for _, r := range runs {
		switch r.Variant {
		case VariantBaseline:
			base = append(base, r)
		case VariantCheckout:
			check = append(check, r)
		}
	}
	s := Summary{Baseline: summarizeVariant(base), Checkout: summarizeVariant(check)}
	if s.Baseline.OrdersPerSecond > 0 {
		s.Ratio = s.Checkout.OrdersPerSecond / s.Baseline.OrdersPerSecond
	}
	for i := range min(len(base), len(check)) {
		if base[i].OrdersPerSecond > 0 {
			s.PairRatios = append(s.PairRatios, check[i].OrdersPerSecond/base[i].OrdersPerSecond)
		}
		if c := totalCPU(check[i].CPUMSPerOrder); c > 0 {
			s.PairCPURatios = append(s.PairCPURatios, totalCPU(base[i].CPUMSPerOrder)/c)
		}
	}
	baseCPU := medianOf(base, func(r Result) float64 { return totalCPU(r.CPUMSPerOrder) })
	if checkCPU := medianOf(check, func(r Result) float64 { return totalCPU(r.CPUMSPerOrder) }); checkCPU > 0 {
		s.CPURatio = baseCPU / checkCPU
	}
	return s
}

// cpuColumns are the processes the Markdown tables show, in this order;
// "server" is the one taking the load (the baseline server or checkout).
var cpuColumns = []string{"server", "worker", "paymentsim", "postgres", "wrk"}

const (
	accountingHeader  = "CPU ms: server | worker | paymentsim | postgres | wrk | commits | WAL records | WAL FPI | WAL bytes | WAL syncs"
	accountingColumns = 10
)

// accountingCells renders a run's (or a median's) per-order accounting, the
// columns of accountingHeader.
func accountingCells(variant string, cpu map[string]float64, p PerOrder) string {
	cells := make([]string, 0, accountingColumns)
	for _, col := range cpuColumns {
		if col == "server" {
			col = variant
		}
		if c, ok := cpu[col]; ok {
			cells = append(cells, fmt.Sprintf("%.3f", c))
		} else {
			cells = append(cells, "–")
		}
	}
	cells = append(cells, fmt.Sprintf("%.2f", p.Commits), fmt.Sprintf("%.1f", p.WALRecords), fmt.Sprintf("%.2f", p.WALFPI),
		fmt.Sprintf("%.0f", p.WALBytes), fmt.Sprintf("%.2f", p.WALSyncs))
	return strings.Join(cells, " | ")
}

// WriteMarkdown renders the report: settings, every run, the medians with
// the per-order accounting, and the ratio.
func (r *Report) WriteMarkdown(w io.Writer) error {
	pw := &printer{w: w}
	m := r.Machine
	pw.printf("Throughput of the real binaries: %s, %d CPUs, Linux %s, %s; load average at start %s.\n",
		m.CPUModel, m.CPUs, m.Kernel, m.GoVersion, m.LoadAverageAtStart)
	pw.printf("PostgreSQL %s: %s.\n", r.Postgres["server_version"], settingsLine(r.Postgres))
	l := r.Load
	pw.printf("Load: %s -t%d -c%d, %g s after a %g s warm-up (timeout %g s), %d interleaved pairs; every request a valid order with its own Idempotency-Key; each run on a fresh database cloned from one migrated template, after a CHECKPOINT.\n",
		l.Tool, l.Threads, l.Connections, l.DurationSeconds, l.WarmupSeconds, l.TimeoutSeconds, l.Pairs)
	pw.printf("Baseline: %s (`throughput baseline`, pool of %d); checkout: checkout + worker + paymentsim at their defaults, RATE_LIMIT=0 (wrk sends from one address), PAYMENTSIM_LATENCY=0s, PAYMENTSIM_JITTER=0s.\n",
		baselineDescription(r.Baseline), BaselinePoolSize)
	if len(r.CheckoutEnv)+len(r.WorkerEnv) > 0 {
		pw.printf("Settings changed: checkout %v, worker %v.\n", r.CheckoutEnv, r.WorkerEnv)
	}
	pw.printf("\nCPU ms per order during the measured load; database work per order over warm-up and load, divided by the orders stored.\n\n")
	pw.printf("| run | orders/s | p50 ms | p99 ms | %s | 2xx not 201 | checkpoint in run | machine busy | other processes |\n", accountingHeader)
	pw.printf("|---|---|---|---|%s---|---|---|---|\n", strings.Repeat("---|", accountingColumns))
	for _, x := range r.Runs {
		pw.printf("| %s %d | %.0f | %.2f | %.2f | %s | %d | %s | %.0f %% | %.0f %% |\n", x.Variant, x.Run, x.OrdersPerSecond,
			x.LatencyMS.P50, x.LatencyMS.P99, accountingCells(x.Variant, x.CPUMSPerOrder, x.PerOrder),
			x.Other2xx, yesNo(x.Checkpointed), 100*x.MachineBusy, 100*x.OtherCPU)
	}

	pw.printf("\nMedians:\n\n| | orders/s (range) | p50 ms | p99 ms | %s |\n", accountingHeader)
	pw.printf("|---|---|---|---|%s\n", strings.Repeat("---|", accountingColumns))
	for _, v := range []struct {
		name string
		s    VariantSummary
	}{{VariantBaseline, r.Summary.Baseline}, {VariantCheckout, r.Summary.Checkout}} {
		if v.s.Runs == 0 {
			continue
		}
		pw.printf("| %s | %.0f (%.0f–%.0f) | %.2f | %.2f | %s |\n", v.name, v.s.OrdersPerSecond, v.s.MinRate, v.s.MaxRate,
			v.s.LatencyP50MS, v.s.LatencyP99MS, accountingCells(v.name, v.s.CPUMSPerOrder, v.s.PerOrder))
	}
	pw.printf("\n**checkout / baseline = %.2f** (median rates; per pair: %s). CPU per order, baseline / checkout (all processes of a run, wrk included): %.2f (per pair: %s).\n",
		r.Summary.Ratio, ratios(r.Summary.PairRatios), r.Summary.CPURatio, ratios(r.Summary.PairCPURatios))
	for _, variant := range []string{VariantBaseline, VariantCheckout} {
		if last := lastRun(r.Runs, variant); last != nil && len(last.Statements) > 0 {
			writeStatements(pw, last)
		}
	}
	return pw.err
}

// statementRows is how many statements the Markdown lists per run.
const statementRows = 12

func writeStatements(pw *printer, r *Result) {
	pw.printf("\nStatements per order, %s run %d (pg_stat_statements, warm-up included; most WAL first):\n\n", r.Variant, r.Run)
	pw.printf("| statement | calls | rows | WAL records | WAL FPI | WAL bytes | exec ms |\n|---|---|---|---|---|---|---|\n")
	var total Statement
	for i, s := range r.Statements {
		total.Calls, total.Rows, total.WALRecords = total.Calls+s.Calls, total.Rows+s.Rows, total.WALRecords+s.WALRecords
		total.WALFPI, total.WALBytes, total.ExecMS = total.WALFPI+s.WALFPI, total.WALBytes+s.WALBytes, total.ExecMS+s.ExecMS
		if i < statementRows {
			pw.printf("| `%s` | %.2f | %.2f | %.2f | %.2f | %.0f | %.3f |\n", shorten(s.Query, 100),
				s.Calls, s.Rows, s.WALRecords, s.WALFPI, s.WALBytes, s.ExecMS)
		}
	}
	pw.printf("| all %d statements | %.2f | %.2f | %.2f | %.2f | %.0f | %.3f |\n", len(r.Statements),
		total.Calls, total.Rows, total.WALRecords, total.WALFPI, total.WALBytes, total.ExecMS)
}

// shorten cuts a statement for a table cell; a '|' would end the cell.
func shorten(q string, n int) string {
	q = strings.ReplaceAll(q, "|", "\\|")
	if r := []rune(q); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return q
}

func baselineDescription(mode string) string {
	switch mode {
	case BaselinePipelined:
		return "BEGIN, INSERT order, INSERT River job row, COMMIT as one pipelined batch (one round trip)"
	default:
		return "BEGIN, INSERT order, River InsertTx, COMMIT (four round trips)"
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func lastRun(runs []Result, variant string) *Result {
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].Variant == variant {
			return &runs[i]
		}
	}
	return nil
}

func settingsLine(s map[string]string) string {
	keys := slices.Sorted(maps.Keys(s))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if k != "server_version" {
			parts = append(parts, k+"="+s[k])
		}
	}
	return strings.Join(parts, ", ")
}

func ratios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

// printer keeps the first write error, so the rendering reads straight.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
