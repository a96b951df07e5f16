package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
