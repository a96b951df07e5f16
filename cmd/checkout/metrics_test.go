package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
	"github.com/resilientcheckout/checkout/internal/telemetry/telemetrytest"
)

// TestExportsDashboardAndAlertMetrics scrapes a running checkout for every
// metric deploy/'s dashboard and alert rules read from it. Checkout runs with
// the price check on (CATALOG_URL pointing at the catalog simulator): only
// then does it build the catalog policy and cache, and export the catalog_*
// and resilience_*{name="catalog"} series the catalog panels read.
func TestExportsDashboardAndAlertMetrics(t *testing.T) {
	t.Parallel()
	sim := simtest.Start(t, 0)
	cat := httptest.NewServer(catalogsim.New(catalogsim.Config{}))
	t.Cleanup(cat.Close)
	p := startCheckout(t, dbtest.URL(t), sim.URL, map[string]string{
		"CATALOG_URL": cat.URL,
		// One failed call opens the breaker, so a breaker transition (a
		// series that exists only once one happened) takes one order.
		"BREAKER_WINDOW":       "1",
		"BREAKER_MIN_CALLS":    "1",
		"PAYMENT_MAX_ATTEMPTS": "1",
	})
	post := func(body string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", uuid.NewString())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /orders: %s, want 201 or 202 (orderBody at the catalog's prices)", resp.Status)
		}
	}
	post(orderBody) // 201, its prices checked against the catalog
	get(t, p.URL+"/health")
	sim.Fault(t, `{"down":true}`)
	post(orderBody) // 202: breaker closed → open

	telemetrytest.CheckExported(t, "checkout", p.URL+"/metrics")
}
