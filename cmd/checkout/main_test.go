package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

func TestMigrateTwiceInARowAndConcurrently(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": dbtest.URL(t)}
	getenv := func(k string) string { return env[k] }
	args := []string{"checkout", "migrate"}

	for i := range 2 {
		if err := run(context.Background(), args, getenv, io.Discard, io.Discard); err != nil {
			t.Fatalf("migrate #%d: %v", i+1, err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = run(context.Background(), args, getenv, io.Discard, io.Discard) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent migrate #%d: %v", i+1, err)
		}
	}
}

// TestMigrateGivesUpAfterMigrateWait: `checkout migrate` against a database
// that never listens retries for MIGRATE_WAIT, then fails saying so.
func TestMigrateGivesUpAfterMigrateWait(t *testing.T) {
	t.Parallel()
	proxy := dbtest.NewProxy(t, dbtest.URL(t))
	proxy.Refuse()
	env := map[string]string{"DATABASE_URL": proxy.URL(), "MIGRATE_WAIT": "700ms"}
	err := run(context.Background(), []string{"checkout", "migrate"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if want := "migrate: database not reachable within 700ms"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error containing %q", err, want)
	}
}

func TestServeProbesAndMetrics(t *testing.T) {
	t.Parallel()
	p := process.Start(t, run, []string{"checkout"}, map[string]string{
		"HTTP_ADDR":       "127.0.0.1:0",
		"DATABASE_URL":    dbtest.URL(t),
		"STRIPE_API_BASE": "http://localhost:8082", // no provider there
	})
	for _, path := range []string{"/health", "/ready", "/metrics"} {
		if got, want := get(t, p.URL+path), http.StatusOK; got != want {
			t.Errorf("GET %s = %d, want %d", path, got, want)
		}
	}
	host := strings.TrimPrefix(p.URL, "http://")
	if err := run(context.Background(), []string{"checkout", "healthcheck"},
		func(k string) string { return map[string]string{"HTTP_ADDR": host}[k] }, io.Discard, io.Discard); err != nil {
		t.Errorf("healthcheck against a running server: %v", err)
	}
}

// TestMetricsAddrServesMetricsOnlyThere: with METRICS_ADDR set, /metrics
// answers on that listener and is gone from the API port, so a network
// policy can open the one to the monitoring system and the other to
// everyone.
func TestMetricsAddrServesMetricsOnlyThere(t *testing.T) {
	t.Parallel()
	metricsAddr := closedAddr(t)
	p := process.Start(t, run, []string{"checkout"}, map[string]string{
		"HTTP_ADDR":       "127.0.0.1:0",
		"METRICS_ADDR":    metricsAddr,
		"DATABASE_URL":    dbtest.URL(t),
		"STRIPE_API_BASE": "http://localhost:8082", // no provider there
	})
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics on METRICS_ADDR: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `http_pool_in_use{pool="api"}`) {
		t.Errorf("GET /metrics on METRICS_ADDR = %d, want 200 with the API pool's series", resp.StatusCode)
	}
	if got, want := get(t, "http://"+metricsAddr+"/orders/x"), http.StatusNotFound; got != want {
		t.Errorf("GET /orders/x on METRICS_ADDR = %d, want %d: that listener serves metrics only", got, want)
	}
	if got, want := get(t, p.URL+"/metrics"), http.StatusNotFound; got != want {
		t.Errorf("GET /metrics on the API port = %d, want %d once METRICS_ADDR is set", got, want)
	}
	if got, want := get(t, p.URL+"/health"), http.StatusOK; got != want {
		t.Errorf("GET /health = %d, want %d", got, want)
	}
}

func TestStartsWithUnreachableDatabase(t *testing.T) {
	t.Parallel()
	p := process.Start(t, run, []string{"checkout"}, map[string]string{
		"HTTP_ADDR":       "127.0.0.1:0",
		"DATABASE_URL":    "postgres://nobody@" + closedAddr(t) + "/none?sslmode=disable",
		"STRIPE_API_BASE": "http://localhost:8082", // no provider there
	})
	if got, want := get(t, p.URL+"/health"), http.StatusOK; got != want {
		t.Errorf("GET /health = %d, want %d: liveness must not depend on the database", got, want)
	}
	if got, want := get(t, p.URL+"/ready"), http.StatusServiceUnavailable; got != want {
		t.Errorf("GET /ready = %d, want %d", got, want)
	}
}

func TestBadConfigurationFailsNamingTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, value string }{
		{"HTTP_ADDR", "8080"},
		{"DATABASE_URL", "mysql://db/app"},
		{"STRIPE_API_BASE", "not a url"},
		{"RESILIENCE_MODE", "fast"},
		{"DB_MAX_CONNS", "0"},
		{"DB_STATEMENT_TIMEOUT", "2"},
		{"LOG_LEVEL", "verbose"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(k string) string { return map[string]string{tt.name: tt.value}[k] }
			err := run(context.Background(), []string{"checkout", "serve"}, getenv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.name) {
				t.Errorf("run with %s=%q: got %v, want an error naming %s", tt.name, tt.value, err, tt.name)
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"checkout", "frobnicate"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("unknown command: got nil error")
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
