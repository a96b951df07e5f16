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
	p := process.Start(t, run, []string{"catalogsim"}, map[string]string{
		"HTTP_ADDR":          "127.0.0.1:0",
		"CATALOGSIM_LATENCY": "0s",
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
	if err := run(t.Context(), []string{"catalogsim", "healthcheck"}, healthcheck, io.Discard, io.Discard); err != nil {
		t.Errorf("healthcheck against a running server: %v", err)
	}

	if err := p.Stop(); err != nil {
		t.Errorf("graceful shutdown: got %v, want nil", err)
	}
	if err := run(t.Context(), []string{"catalogsim", "healthcheck"}, healthcheck, io.Discard, io.Discard); err == nil {
		t.Error("healthcheck after shutdown: got nil, want an error")
	}
}

func TestPricesAndAdminThroughRun(t *testing.T) {
	t.Parallel()
	p := process.Start(t, run, []string{"catalogsim"}, map[string]string{
		"HTTP_ADDR":              "127.0.0.1:0",
		"CATALOGSIM_LATENCY":     "0s",
		"CATALOGSIM_ADMIN_TOKEN": "s3cret",
	})
	resp, err := http.Get(p.URL + "/v1/prices?skus=SKU-1,SKU-404")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, want := string(b), `{"prices":{"SKU-1":{"unit_price":1299,"currency":"USD"}},"unknown":["SKU-404"]}`+"\n"; got != want {
		t.Errorf("GET /v1/prices: got %s, want %s", got, want)
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
		{"HTTP_ADDR", "8083"},
		{"CATALOGSIM_LATENCY", "fast"},
		{"CATALOGSIM_JITTER", "-1s"},
		{"SHUTDOWN_TIMEOUT", "10"},
		{"LOG_LEVEL", "verbose"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(k string) string { return map[string]string{tt.name: tt.value}[k] }
			err := run(t.Context(), []string{"catalogsim"}, getenv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.name) {
				t.Errorf("run with %s=%q: got %v, want an error naming %s", tt.name, tt.value, err, tt.name)
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"catalogsim", "frobnicate"}, func(string) string { return "" }, io.Discard, io.Discard)
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
