package main

import (
	"net/http"
	"testing"

	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/telemetry/telemetrytest"
)

// TestExportsDashboardMetrics scrapes a running catalog simulator for every
// metric deploy/'s dashboard reads from it.
func TestExportsDashboardMetrics(t *testing.T) {
	t.Parallel()
	p := process.Start(t, command.Run, []string{"catalogsim"}, map[string]string{
		"HTTP_ADDR":          "127.0.0.1:0",
		"CATALOGSIM_LATENCY": "0s",
	})
	resp, err := http.Get(p.URL + "/v1/prices?skus=SKU-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusOK; got != want {
		t.Fatalf("GET /v1/prices: status %d, want %d", got, want)
	}

	telemetrytest.CheckExported(t, "catalogsim", p.URL+"/metrics")
}
