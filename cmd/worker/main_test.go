package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

func TestServeProbesAndMetrics(t *testing.T) {
	t.Parallel()
	p := process.Start(t, run, []string{"worker"}, map[string]string{
		"HTTP_ADDR":       "127.0.0.1:0",
		"DATABASE_URL":    dbtest.URL(t),
		"STRIPE_API_BASE": "http://localhost:8082", // no provider there
	})
	for _, path := range []string{"/health", "/ready", "/metrics"} {
		resp, err := http.Get(p.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if got, want := resp.StatusCode, http.StatusOK; got != want {
			t.Errorf("GET %s = %d, want %d", path, got, want)
		}
	}
}

func TestBadConfigurationFailsNamingTheVariable(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{"HTTP_ADDR": "x", "DATABASE_URL": "http://db", "DB_MAX_CONNS": "-1", "RESILIENCE_MODE": "bogus", "DEBUG_ADDR": "6060"} {
		getenv := func(k string) string { return map[string]string{name: value}[k] }
		err := run(context.Background(), []string{"worker"}, getenv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("run with %s=%q: got %v, want an error naming %s", name, value, err, name)
		}
	}
}

func TestStartsWithUnreachableDatabase(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	p := process.Start(t, run, []string{"worker"}, map[string]string{
		"HTTP_ADDR":       "127.0.0.1:0",
		"DATABASE_URL":    "postgres://nobody@" + closed + "/none?sslmode=disable",
		"STRIPE_API_BASE": "http://localhost:8082", // no provider there
	})
	for path, want := range map[string]int{"/health": http.StatusOK, "/ready": http.StatusServiceUnavailable} {
		resp, err := http.Get(p.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
}
