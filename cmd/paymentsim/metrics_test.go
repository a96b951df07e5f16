package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/telemetry/telemetrytest"
)

// TestExportsDashboardAndAlertMetrics scrapes a running simulator for every
// metric deploy/'s dashboard and alert rules read from it.
func TestExportsDashboardAndAlertMetrics(t *testing.T) {
	t.Parallel()
	p := process.Start(t, command.Run, []string{"paymentsim"}, map[string]string{
		"HTTP_ADDR":          "127.0.0.1:0",
		"PAYMENTSIM_LATENCY": "0s",
	})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL+"/v1/payment_intents",
		strings.NewReader("amount=100&currency=usd&payment_method=pm_card_visa&confirm=true&metadata[order_id]=metrics"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_test_metrics")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", "metrics-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusOK; got != want {
		t.Fatalf("charge: status %d, want %d", got, want)
	}

	telemetrytest.CheckExported(t, "paymentsim", p.URL+"/metrics")
}
