package throughput

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	labprocess "github.com/resilientcheckout/checkout/internal/lab/process"
)

// bin holds the binaries the smoke tests run, built once.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "throughput-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := labprocess.Build("../../..", dir, "./cmd/checkout", "./cmd/worker", "./cmd/paymentsim", "./cmd/throughput"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// smokeConfig is a run of a few seconds: the smoke tests check that the tool
// works end to end, not the figures.
func smokeConfig(t *testing.T) Config {
	t.Helper()
	// The tool reads the cluster's CPU from /proc, so it needs a server on
	// this machine: a container started by the test would not do.
	dbURL := os.Getenv("TEST_DATABASE_URL")
	if dbURL == "" {
		t.Fatal("set TEST_DATABASE_URL to a PostgreSQL running on this machine whose role may create databases " +
			"and CHECKPOINT (`bash .ci/run` starts one)")
	}
	cfg := DefaultConfig()
	cfg.DatabaseURL, cfg.Bin, cfg.WorkDir = dbURL, bin, t.TempDir()
	cfg.Runs, cfg.Warmup, cfg.Duration, cfg.Threads, cfg.Connections = 1, time.Second, time.Second, 1, 4
	return cfg
}

func TestRunSmoke(t *testing.T) {
	t.Parallel()
	report, err := Run(context.Background(), smokeConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Runs) != 2 || report.Runs[0].Variant != VariantBaseline || report.Runs[1].Variant != VariantCheckout {
		t.Fatalf("runs %+v, want baseline then checkout", report.Runs)
	}
	for _, r := range report.Runs {
		server := r.Variant
		if r.OrdersPerSecond <= 0 || r.Created != r.Requests || r.OrdersInDatabase < r.Requests {
			t.Errorf("%s: %v orders/s, %d created of %d, %d in the database", server, r.OrdersPerSecond, r.Created, r.Requests, r.OrdersInDatabase)
		}
		if r.CPUMSPerOrder[server] <= 0 || r.CPUMSPerOrder["postgres"] <= 0 || r.CPUMSPerOrder["wrk"] <= 0 {
			t.Errorf("%s: CPU per order %v", server, r.CPUMSPerOrder)
		}
		// At least the order's own commit, and its rows' WAL.
		if r.PerOrder.Commits < 1 || r.PerOrder.WALRecords < 2 || r.PerOrder.WALBytes <= 0 {
			t.Errorf("%s: per order %+v", server, r.PerOrder)
		}
		if r.LatencyMS.P50 <= 0 || r.LatencyMS.P99 < r.LatencyMS.P50 {
			t.Errorf("%s: latency %+v", server, r.LatencyMS)
		}
	}
	if _, ok := report.Runs[1].CPUMSPerOrder["paymentsim"]; !ok {
		t.Errorf("checkout run accounts no paymentsim CPU: %v", report.Runs[1].CPUMSPerOrder)
	}
	// With a provider answering at once every order is paid synchronously.
	if c := report.Runs[1]; c.OrderStatuses["paid"] != c.OrdersInDatabase {
		t.Errorf("checkout orders by status %v, want all %d paid", c.OrderStatuses, c.OrdersInDatabase)
	}
	if s := report.Summary; s.Ratio <= 0 || len(s.PairRatios) != 1 {
		t.Errorf("summary %+v", s)
	}
	if report.Postgres["fsync"] == "" || report.Machine.CPUs == 0 {
		t.Errorf("settings %v, machine %+v", report.Postgres, report.Machine)
	}
}

// TestRunRefusesNon2xx gives checkout a one-slot API pool that does not
// wait: concurrent requests get 503, and the run must be refused.
func TestRunRefusesNon2xx(t *testing.T) {
	t.Parallel()
	cfg := smokeConfig(t)
	cfg.CheckoutEnv = []string{"API_POOL_SIZE=1", "API_POOL_WAIT=0s"}
	report, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "checkout run 1 refused") || !strings.Contains(err.Error(), "(the first: 503)") {
		t.Fatalf("Run() = %v, want checkout run 1 refused for its 503s", err)
	}
	if len(report.Runs) != 1 || report.Runs[0].Variant != VariantBaseline {
		t.Errorf("runs before the refusal %+v, want the baseline's", report.Runs)
	}
}
