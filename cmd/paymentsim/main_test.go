package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/sim/simulator/simulatortest"
)

func TestServeHealthAndShutdown(t *testing.T) {
	t.Parallel()
	simulatortest.HealthAndShutdown(t, command.Run, "paymentsim", map[string]string{
		"HTTP_ADDR":          "127.0.0.1:0",
		"PAYMENTSIM_LATENCY": "0s",
	})
}

func TestChargeThroughRun(t *testing.T) {
	t.Parallel()
	p := process.Start(t, command.Run, []string{"paymentsim"}, map[string]string{
		"HTTP_ADDR":              "127.0.0.1:0",
		"PAYMENTSIM_LATENCY":     "0s",
		"PAYMENTSIM_ADMIN_TOKEN": "s3cret",
	})
	form := "amount=100&currency=usd&payment_method=pm_card_visa&confirm=true&metadata[order_id]=r1"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL+"/v1/payment_intents", strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_test_main")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", "order-r1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var pi struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	err = json.NewDecoder(resp.Body).Decode(&pi)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || pi.Status != "succeeded" {
		t.Fatalf("POST /v1/payment_intents: got %d, status %q (%v); want 200 and a succeeded PaymentIntent", resp.StatusCode, pi.Status, err)
	}

	retrieve, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL+"/v1/payment_intents/"+pi.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	retrieve.Header.Set("Authorization", "Bearer sk_test_main")
	if got, want := simulatortest.Status(t, retrieve), http.StatusOK; got != want {
		t.Errorf("GET /v1/payment_intents/%s: got %d, want %d", pi.ID, got, want)
	}

	simulatortest.AdminNeedsToken(t, p.URL, "s3cret")
}

func TestBadConfigurationFailsNamingTheVariable(t *testing.T) {
	t.Parallel()
	simulatortest.BadConfigurationNamesTheVariable(t, command.Run, "paymentsim", [][2]string{
		{"HTTP_ADDR", "8082"},
		{"PAYMENTSIM_LATENCY", "fast"},
		{"PAYMENTSIM_JITTER", "-1s"},
		{"PAYMENTSIM_LEDGER_CAP", "0"},
		{"PAYMENTSIM_CHARGE_CAP", "many"},
		{"PAYMENTSIM_CHARGE_CAP", "99999"}, // below the default PAYMENTSIM_LEDGER_CAP
		{"PAYMENTSIM_CAPACITY", "-1"},
		{"PAYMENTSIM_LATENCY_SIGMA", "-0.5"},
		{"PAYMENTSIM_LATENCY_CAP", "380ms"}, // without a PAYMENTSIM_LATENCY_SIGMA
		{"PAYMENTSIM_RATE_LIMIT", "-1"},
		{"SHUTDOWN_TIMEOUT", "10"},
		{"LOG_LEVEL", "verbose"},
	})
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	simulatortest.UnknownCommand(t, command.Run, "paymentsim")
}
