package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// TestShutdownDrainsBeforeStopping stops checkout as SIGTERM does and
// checks the readiness drain through the real wiring: /ready turns 503 at
// once while /health and business requests are still answered, and only
// after SHUTDOWN_DRAIN_DELAY does the server stop.
func TestShutdownDrainsBeforeStopping(t *testing.T) {
	t.Parallel()
	const drain = 3 * time.Second
	p := process.Start(t, run, []string{"checkout"}, map[string]string{
		"HTTP_ADDR":            "127.0.0.1:0",
		"DATABASE_URL":         dbtest.URL(t),
		"STRIPE_API_BASE":      "http://localhost:8082", // no provider there
		"SHUTDOWN_DRAIN_DELAY": drain.String(),
	})
	if got := get(t, p.URL+"/ready"); got != http.StatusOK {
		t.Fatalf("GET /ready before shutdown = %d, want 200", got)
	}

	stopped := time.Now()
	stopErr := make(chan error, 1)
	go func() { stopErr <- p.Stop() }()
	for deadline := stopped.Add(drain / 2); get(t, p.URL+"/ready") != http.StatusServiceUnavailable; {
		if time.Now().After(deadline) {
			t.Fatalf("GET /ready still not 503 %v after the stop", drain/2)
		}
		time.Sleep(20 * time.Millisecond) // polling a real process
	}
	if got := get(t, p.URL+"/health"); got != http.StatusOK {
		t.Errorf("GET /health while draining = %d, want 200", got)
	}
	// A business request, through the API pool and the database.
	if got := get(t, p.URL+"/orders/00000000-0000-4000-8000-000000000000"); got != http.StatusNotFound {
		t.Errorf("GET /orders/{unknown id} while draining = %d, want 404", got)
	}
	if elapsed := time.Since(stopped); elapsed >= drain {
		t.Fatalf("the checks took %v, longer than the %v drain: the results above prove nothing", elapsed, drain)
	}

	if err := <-stopErr; err != nil {
		t.Fatalf("checkout stopped with error: %v", err)
	}
	if elapsed := time.Since(stopped); elapsed < drain {
		t.Errorf("checkout stopped %v after the signal, before the %v drain was over", elapsed, drain)
	}
	if resp, err := http.Get(p.URL + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("GET /health after shutdown = %d, want the connection refused", resp.StatusCode)
	}
}
