package throughput

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestMedian(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7, 7, 1}, 7},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.in...)
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.in[i] {
				t.Fatalf("median reordered its argument: %v", tt.in)
			}
		}
	}
}

func TestAccount(t *testing.T) {
	t.Parallel()
	var w wrkResult
	w.Requests, w.DurationUS = 1000, 2e6
	w.Status.Created = 1000
	w.LatencyUS.P50, w.LatencyUS.P99 = 1500, 9000
	w.CPU = 100 * time.Millisecond
	before := cpuSample{
		Process: map[string]time.Duration{"checkout": time.Second, "postgres": 10 * time.Second},
		Machine: machineCPU{Busy: 50 * time.Second, Total: 100 * time.Second},
	}
	after := cpuSample{
		Process: map[string]time.Duration{"checkout": 1500 * time.Millisecond, "postgres": 11 * time.Second},
		// 4 s of wall time on 2 CPUs, 3.8 s busy: 1.6 s of it ours.
		Machine: machineCPU{Busy: 53800 * time.Millisecond, Total: 104 * time.Second},
	}
	pg := pgCounters{WALRecords: 25000, WALBytes: 3_000_000, WALSyncs: 500, Commits: 2500, CheckpointLSN: "0/2000060"}.
		sub(pgCounters{CheckpointLSN: "0/1000028"})
	r := account(VariantCheckout, 2, w, before, after, pg, 1250, map[string]int64{"paid": 1250})

	if !r.Checkpointed {
		t.Error("a checkpoint completed during the run, not reported")
	}
	if r.OrdersPerSecond != 500 || r.LatencyMS.P50 != 1.5 || r.LatencyMS.P99 != 9 || r.Created != 1000 {
		t.Errorf("rate %v, latency %+v, created %d", r.OrdersPerSecond, r.LatencyMS, r.Created)
	}
	for name, want := range map[string]float64{"checkout": 0.5, "postgres": 1, "wrk": 0.1} {
		if got := r.CPUMSPerOrder[name]; !near(got, want) {
			t.Errorf("CPU ms per order of %s = %v, want %v", name, got, want)
		}
	}
	if !near(r.MachineBusy, 0.95) || !near(r.OtherCPU, 0.55) {
		t.Errorf("machine busy %v, other %v; want 0.95, 0.55", r.MachineBusy, r.OtherCPU)
	}
	// Database work is divided by the orders stored (warm-up included).
	if want := (PerOrder{WALRecords: 20, WALBytes: 2400, WALSyncs: 0.4, Commits: 2}); r.PerOrder != want {
		t.Errorf("per order %+v, want %+v", r.PerOrder, want)
	}
}

func result(variant string, run int, rate, serverCPU float64) Result {
	return Result{
		Variant: variant, Run: run, OrdersPerSecond: rate,
		LatencyMS:     Latency{P50: 1000 / rate, P99: 5000 / rate},
		CPUMSPerOrder: map[string]float64{variant: serverCPU, "postgres": 2 * serverCPU},
		PerOrder:      PerOrder{Commits: float64(run), WALRecords: 10 * float64(run)},
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	s := summarize([]Result{
		result(VariantBaseline, 1, 5000, 0.2), result(VariantCheckout, 1, 1000, 0.6),
		result(VariantBaseline, 2, 4000, 0.1), result(VariantCheckout, 2, 1200, 0.5),
		result(VariantBaseline, 3, 6000, 0.3), result(VariantCheckout, 3, 1500, 0.4),
	})
	if s.Baseline.OrdersPerSecond != 5000 || s.Baseline.MinRate != 4000 || s.Baseline.MaxRate != 6000 {
		t.Errorf("baseline rate %v (%v–%v), want 5000 (4000–6000)", s.Baseline.OrdersPerSecond, s.Baseline.MinRate, s.Baseline.MaxRate)
	}
	if s.Checkout.OrdersPerSecond != 1200 || s.Checkout.Runs != 3 {
		t.Errorf("checkout rate %v over %d runs, want 1200 over 3", s.Checkout.OrdersPerSecond, s.Checkout.Runs)
	}
	// The ratio is of the medians, not the median of the ratios.
	if !near(s.Ratio, 0.24) {
		t.Errorf("ratio %v, want 0.24", s.Ratio)
	}
	if want := []float64{0.2, 0.3, 0.25}; len(s.PairRatios) != 3 || !near(s.PairRatios[0], want[0]) ||
		!near(s.PairRatios[1], want[1]) || !near(s.PairRatios[2], want[2]) {
		t.Errorf("pair ratios %v, want %v", s.PairRatios, want)
	}
	// CPU per order: baseline 0.6, 0.3, 0.9 (median 0.6); checkout 1.8, 1.5, 1.2 (median 1.5).
	if !near(s.CPURatio, 0.4) || len(s.PairCPURatios) != 3 || !near(s.PairCPURatios[0], 0.6/1.8) ||
		!near(s.PairCPURatios[1], 0.3/1.5) || !near(s.PairCPURatios[2], 0.9/1.2) {
		t.Errorf("CPU ratio %v, per pair %v; want 0.4, [0.33 0.2 0.75]", s.CPURatio, s.PairCPURatios)
	}
	if got := s.Checkout.CPUMSPerOrder["checkout"]; got != 0.5 {
		t.Errorf("median checkout CPU %v, want 0.5", got)
	}
	if got := s.Checkout.CPUMSPerOrder["postgres"]; got != 1 {
		t.Errorf("median postgres CPU %v, want 1", got)
	}
	if s.Checkout.PerOrder.Commits != 2 || s.Checkout.PerOrder.WALRecords != 20 {
		t.Errorf("per order medians %+v", s.Checkout.PerOrder)
	}
	if got := s.Checkout.LatencyP50MS; !near(got, 1000.0/1200) {
		t.Errorf("p50 median %v", got)
	}
}

func TestWriteMarkdown(t *testing.T) {
	t.Parallel()
	runs := []Result{result(VariantBaseline, 1, 5000, 0.2), result(VariantCheckout, 1, 1250, 0.6)}
	runs[1].Statements = []Statement{
		{Query: "INSERT INTO orders (a) VALUES ($1) RETURNING a || b", Calls: 1, Rows: 1, WALRecords: 3, WALBytes: 400, ExecMS: 0.05},
		{Query: "UPDATE orders SET status = $1", Calls: 1, Rows: 1, WALRecords: 2, WALBytes: 200, ExecMS: 0.03},
	}
	r := &Report{
		Machine:  Machine{CPUModel: "Test CPU", CPUs: 2},
		Postgres: map[string]string{"server_version": "15.9", "fsync": "on"},
		Load:     Load{Tool: "wrk", Threads: 2, Connections: 32, WarmupSeconds: 2, DurationSeconds: 10, Pairs: 1},
		Runs:     runs, Summary: summarize(runs),
	}
	var b bytes.Buffer
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Test CPU, 2 CPUs", "PostgreSQL 15.9: fsync=on.", "wrk -t2 -c32, 10 s after a 2 s warm-up",
		"| baseline 1 | 5000 | 0.20 | 1.00 | 0.200 | – | – | 0.400 | – | 1.00 | 10.0 | 0.00 | 0 | 0.00 | 0 | no |", "| checkout 1 | 1250 | 0.80 | 4.00 | 0.600 | – | – | 1.200 | – |",
		"| baseline | 5000 (5000–5000) | 0.20 | 1.00 | 0.200 | – | – | 0.400 | – |",
		"| checkout | 1250 (1250–1250) | 0.80 | 4.00 | 0.600 | – | – | 1.200 | – |",
		"**checkout / baseline = 0.25** (median rates; per pair: 0.25). CPU per order, baseline / checkout (all processes of a run, wrk included): 0.33 (per pair: 0.33).",
		"Statements per order, checkout run 1",
		"| `INSERT INTO orders (a) VALUES ($1) RETURNING a \\|\\| b` | 1.00 | 1.00 | 3.00 | 0.00 | 400 | 0.050 |",
		"| all 2 statements | 2.00 | 2.00 | 5.00 | 0.00 | 600 | 0.080 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Statements per order, baseline") {
		t.Errorf("Markdown lists statements for a run that has none:\n%s", out)
	}
}

func TestStatementsPerOrder(t *testing.T) {
	t.Parallel()
	got := perOrder([]Statement{{Query: "q", Calls: 200, Rows: 100, WALRecords: 300, WALFPI: 2, WALBytes: 4000, ExecMS: 50}}, 100)
	want := Statement{Query: "q", Calls: 2, Rows: 1, WALRecords: 3, WALFPI: 0.02, WALBytes: 40, ExecMS: 0.5}
	if len(got) != 1 || got[0] != want {
		t.Errorf("perOrder = %+v, want %+v", got, want)
	}
}
