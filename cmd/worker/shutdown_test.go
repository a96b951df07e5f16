package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// TestShutdownDrainsHTTPBeforeStopping stops the worker as SIGTERM does:
// its /ready turns 503 at once while /health and /metrics are still
// answered, and the HTTP server stops only after SHUTDOWN_DRAIN_DELAY.
func TestShutdownDrainsHTTPBeforeStopping(t *testing.T) {
	t.Parallel()
	const drain = 3 * time.Second
	p := process.Start(t, run, []string{"worker"}, map[string]string{
		"HTTP_ADDR":            "127.0.0.1:0",
		"DATABASE_URL":         dbtest.URL(t),
		"STRIPE_API_BASE":      "http://localhost:8082", // no provider there
		"SHUTDOWN_DRAIN_DELAY": drain.String(),
	})
	waitStatus(t, p.URL+"/ready", http.StatusOK, 10*time.Second)

	stopped := time.Now()
	stopErr := make(chan error, 1)
	go func() { stopErr <- p.Stop() }()
	waitStatus(t, p.URL+"/ready", http.StatusServiceUnavailable, drain/2)
	for _, path := range []string{"/health", "/metrics"} {
		if got := status(t, p.URL+path); got != http.StatusOK {
			t.Errorf("GET %s while draining = %d, want 200", path, got)
		}
	}
	if elapsed := time.Since(stopped); elapsed >= drain {
		t.Fatalf("the checks took %v, longer than the %v drain: the results above prove nothing", elapsed, drain)
	}

	if err := <-stopErr; err != nil {
		t.Fatalf("worker stopped with error: %v", err)
	}
	if elapsed := time.Since(stopped); elapsed < drain {
		t.Errorf("worker stopped %v after the signal, before the %v drain was over", elapsed, drain)
	}
	if got := status(t, p.URL+"/health"); got != 0 {
		t.Errorf("GET /health after shutdown = %d, want the connection refused", got)
	}
}
