package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/lab/experiment"
)

func TestRunRejectsBadConfiguration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown fault", []string{"experiment", "-database", "postgres://localhost/x", "-fault", "sideways"}, `fault "sideways"`},
		{"no database", []string{"experiment", "run"}, "database URL"},
		{"unknown flag", []string{"experiment", "-speed", "9"}, "flag provided but not defined"},
		{"stray argument", []string{"experiment", "-database", "postgres://localhost/x", "now"}, "unexpected arguments"},
		{"report without files", []string{"experiment", "report"}, "usage"},
		{"ramp without database", []string{"experiment", "ramp", "-rate-to", "60"}, "database URL"},
		{"ramp going negative", []string{"experiment", "ramp", "-database", "postgres://localhost/x", "-rate-to", "-5"}, "ramp end rate"},
		{"catalog outage without a catalog", []string{"experiment", "catalog-outage", "-database", "postgres://localhost/x"}, "catalog URL is required"},
		{"catalog cold start without a catalog", []string{"experiment", "catalog-cold", "-database", "postgres://localhost/x"}, "catalog URL is required"},
		{"hang is not a catalog fault", []string{"experiment", "catalog-outage", "-database", "postgres://localhost/x", "-catalog", "http://localhost:8083", "-fault", "hang"}, "for the catalog"},
		{"unknown fault target", []string{"experiment", "-database", "postgres://localhost/x", "-fault-target", "inventory"}, `fault target "inventory"`},
		{"relative catalog URL", []string{"experiment", "-database", "postgres://localhost/x", "-catalog", "localhost:8083"}, "catalog URL"},
		{"brownout not slower", []string{"experiment", "-database", "postgres://localhost/x", "-fault", "brownout", "-latency-factor", "1"}, "latency factor"},
		{"error burst without errors", []string{"experiment", "-database", "postgres://localhost/x", "-fault", "errors", "-error-rate", "0"}, "error rate"},
		{"error burst of 200s", []string{"experiment", "-database", "postgres://localhost/x", "-fault", "errors", "-error-status", "200"}, "error status 200"},
		{"brownout is no catalog fault", []string{"experiment", "catalog-outage", "-database", "postgres://localhost/x", "-catalog", "http://localhost:8083", "-fault", "brownout"}, "for the catalog"},
		{"overlapping repeats", []string{"experiment", "-database", "postgres://localhost/x", "-fault", "hang", "-outage-for", "2s", "-repeat", "5", "-repeat-every", "2s"}, "windows overlap"},
		{"rate after no fault", []string{"experiment", "-database", "postgres://localhost/x", "-fault", "none", "-rate-after", "20"}, "needs a fault"},
		{"matrix without files", []string{"experiment", "matrix"}, "usage"},
		{"derive without a latency", []string{"experiment", "derive", "-sigma", "0.5", "-rate", "40"}, "positive -median"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			getenv := func(string) string { return "" }
			err := run(t.Context(), tt.args, getenv, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestRunReportCombines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var paths []string
	for _, label := range []string{"none", "protected"} {
		path := filepath.Join(dir, label+".json")
		doc := `{"label":"` + label + `","scenario":{"rate":20,"duration_ms":6000,"outage_start_ms":500,"outage_for_ms":3000,"fault":"latency","outage_latency_ms":10000},"audit":{"drained":true}}`
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	var stdout, stderr strings.Builder
	if err := run(t.Context(), append([]string{"experiment", "report"}, paths...), os.Getenv, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| none, 20 req/s |", "| protected, 20 req/s |"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("combined table lacks %q:\n%s", want, stdout.String())
		}
	}
}

// writeReports writes a JSON report per document into a new directory and returns the paths.
func writeReports(t *testing.T, docs ...string) []string {
	t.Helper()
	dir := t.TempDir()
	paths := make([]string, len(docs))
	for i, doc := range docs {
		paths[i] = filepath.Join(dir, strconv.Itoa(i)+".json")
		if err := os.WriteFile(paths[i], []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

func TestRunMatrix(t *testing.T) {
	t.Parallel()
	run1 := func(mode, audit string) string {
		return `{"label":"` + mode + `","row":"1. healthy","scenario":{"rate":40,"duration_ms":15000,"fault":"none"},` +
			`"checkout":{"all":{"count":600,"outcomes":{"201":600},"p50_ms":205,"p99_ms":240}},"audit":` + audit + `}`
	}
	paths := writeReports(t, run1("timeout", `{"drained":true}`), run1("protected", `{"drained":true}`))
	jsonPath := filepath.Join(t.TempDir(), "matrix.json")
	var stdout, stderr strings.Builder
	if err := run(t.Context(), append([]string{"experiment", "matrix", "-json", jsonPath}, paths...), os.Getenv, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 1. healthy | timeout, 40 req/s | 100 / 0 / 0 % | 205 ms / 240 ms |", "|  | protected, 40 req/s |"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("matrix lacks %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var lines []experiment.MatrixLine
	if err := json.Unmarshal(b, &lines); err != nil || len(lines) != 2 || lines[1].Mode != "protected" || lines[1].Charged != 600 {
		t.Errorf("matrix.json = %s (%v), want a line per run", b, err)
	}

	// A run that lost an order fails the command, after the table is printed.
	paths = writeReports(t, run1("timeout", `{"drained":true,"lost":["o1"]}`))
	stdout.Reset()
	err = run(t.Context(), append([]string{"experiment", "matrix"}, paths...), os.Getenv, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "lost an order") || !strings.Contains(stdout.String(), "INVARIANT BROKEN") {
		t.Errorf("matrix with a lost order = %v, printing:\n%s\nwant an error and the warning", err, stdout.String())
	}
}

func TestRunDerive(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	if err := run(t.Context(), []string{"experiment", "derive", "-median", "600ms", "-sigma", "0.5", "-rate", "40"}, os.Getenv, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 7 || lines[0] != "PAYMENT_ATTEMPT_TIMEOUT=2.82s" {
		t.Errorf("derive printed %q, want seven assignments, the attempt timeout first", lines)
	}
	stdout.Reset()
	if err := run(t.Context(), []string{"experiment", "derive", "-note", "-median", "600ms", "-sigma", "0.5", "-rate", "40"}, os.Getenv, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "p99.9 = 2.82s") {
		t.Errorf("derive -note printed %q, want the derivation", stdout.String())
	}
}
