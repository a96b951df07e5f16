package main

import (
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
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL+"/v1/charges",
		strings.NewReader(`{"amount":100,"currency":"USD","payment_method":"pm_card_visa","reference":"r1"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "order-r1")
	if got, want := simulatortest.Status(t, req), http.StatusCreated; got != want {
		t.Errorf("POST /v1/charges: got %d, want %d", got, want)
	}

	lookup, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL+"/v1/charges?reference=r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := simulatortest.Status(t, lookup), http.StatusOK; got != want {
		t.Errorf("GET /v1/charges?reference=r1: got %d, want %d", got, want)
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
