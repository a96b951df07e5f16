package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/lab/process"
)

func TestServeHealthAndShutdown(t *testing.T) {
	t.Parallel()
	p := process.Start(t, run, []string{"paymentsim"}, map[string]string{
		"HTTP_ADDR":          "127.0.0.1:0",
		"PAYMENTSIM_LATENCY": "0s",
	})

	resp, err := http.Get(p.URL + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	defer resp.Body.Close()
	var body struct{ Status string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("decode /health: %v", err)
	}
	if got, want := resp.StatusCode, http.StatusOK; got != want {
		t.Errorf("GET /health status: got %d, want %d", got, want)
	}
	if got, want := body.Status, "ok"; got != want {
		t.Errorf("GET /health status field: got %q, want %q", got, want)
	}

	host := strings.TrimPrefix(p.URL, "http://")
	healthcheck := func(k string) string { return map[string]string{"HTTP_ADDR": host}[k] }
	if err := run(t.Context(), []string{"paymentsim", "healthcheck"}, healthcheck, io.Discard, io.Discard); err != nil {
		t.Errorf("healthcheck against a running server: %v", err)
	}

	if err := p.Stop(); err != nil {
		t.Errorf("graceful shutdown: got %v, want nil", err)
	}
	if err := run(t.Context(), []string{"paymentsim", "healthcheck"}, healthcheck, io.Discard, io.Discard); err == nil {
		t.Error("healthcheck after shutdown: got nil, want an error")
	}
}

func TestChargeThroughRun(t *testing.T) {
	t.Parallel()
	p := process.Start(t, run, []string{"paymentsim"}, map[string]string{
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
	if got, want := status(t, req), http.StatusCreated; got != want {
		t.Errorf("POST /v1/charges: got %d, want %d", got, want)
	}

	lookup, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL+"/v1/charges?reference=r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := status(t, lookup), http.StatusOK; got != want {
		t.Errorf("GET /v1/charges?reference=r1: got %d, want %d", got, want)
	}

	stats, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL+"/admin/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := status(t, stats), http.StatusUnauthorized; got != want {
		t.Errorf("GET /admin/stats without token: got %d, want %d", got, want)
	}
	stats.Header.Set("Authorization", "Bearer s3cret")
	if got, want := status(t, stats), http.StatusOK; got != want {
		t.Errorf("GET /admin/stats with token: got %d, want %d", got, want)
	}
}

func TestBadConfigurationFailsNamingTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, value string }{
		{"HTTP_ADDR", "8082"},
		{"PAYMENTSIM_LATENCY", "fast"},
		{"PAYMENTSIM_JITTER", "-1s"},
		{"PAYMENTSIM_LEDGER_CAP", "0"},
		{"PAYMENTSIM_CHARGE_CAP", "many"},
		{"PAYMENTSIM_CHARGE_CAP", "99999"}, // below the default PAYMENTSIM_LEDGER_CAP
		{"PAYMENTSIM_CAPACITY", "-1"},
		{"SHUTDOWN_TIMEOUT", "10"},
		{"LOG_LEVEL", "verbose"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(k string) string { return map[string]string{tt.name: tt.value}[k] }
			err := run(t.Context(), []string{"paymentsim"}, getenv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.name) {
				t.Errorf("run with %s=%q: got %v, want an error naming %s", tt.name, tt.value, err, tt.name)
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"paymentsim", "frobnicate"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("unknown command: got nil error")
	}
}

func status(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
