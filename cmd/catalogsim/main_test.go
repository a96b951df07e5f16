package main

import (
	"io"
	"net/http"
	"testing"

	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/sim/simulator/simulatortest"
)

func TestServeHealthAndShutdown(t *testing.T) {
	t.Parallel()
	simulatortest.HealthAndShutdown(t, command.Run, "catalogsim", map[string]string{
		"HTTP_ADDR":          "127.0.0.1:0",
		"CATALOGSIM_LATENCY": "0s",
	})
}

func TestPricesAndAdminThroughRun(t *testing.T) {
	t.Parallel()
	p := process.Start(t, command.Run, []string{"catalogsim"}, map[string]string{
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

	simulatortest.AdminNeedsToken(t, p.URL, "s3cret")
}

func TestBadConfigurationFailsNamingTheVariable(t *testing.T) {
	t.Parallel()
	simulatortest.BadConfigurationNamesTheVariable(t, command.Run, "catalogsim", [][2]string{
		{"HTTP_ADDR", "8083"},
		{"CATALOGSIM_LATENCY", "fast"},
		{"CATALOGSIM_JITTER", "-1s"},
		{"SHUTDOWN_TIMEOUT", "10"},
		{"LOG_LEVEL", "verbose"},
	})
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	simulatortest.UnknownCommand(t, command.Run, "catalogsim")
}
