package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// TestWorkerSurvivesDatabaseOutage cuts the worker off from Postgres while
// it has a backlog, then restores the connection: without a restart the
// worker must report not-ready during the outage (but stay live) and drain
// the backlog afterwards (docs/design.md, "Invariants": back within 20 s).
func TestWorkerSurvivesDatabaseOutage(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	proxy := dbtest.NewProxy(t, dbURL)
	sim := simtest.Start(t, 10*time.Millisecond)
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	w := process.Start(t, run, []string{"worker"}, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": proxy.URL(), "STRIPE_API_BASE": sim.URL,
	})

	sim.Fault(t, `{"down":true}`)
	const n = 5
	placeOrders(t, db, sim.URL, n) // straight to Postgres: the API is not under test
	sim.Heal(t)

	proxy.Cut()
	waitStatus(t, w.URL+"/ready", http.StatusServiceUnavailable, 5*time.Second)
	if got := status(t, w.URL+"/health"); got != http.StatusOK {
		t.Errorf("/health during the database outage = %d, want 200", got)
	}
	time.Sleep(3 * time.Second) // keep the database away across River's fetch and leadership cycles
	proxy.Restore()
	restored := time.Now()

	waitStatus(t, w.URL+"/ready", http.StatusOK, 20*time.Second)
	for deadline := restored.Add(20 * time.Second); countOrders(t, db, order.StatusPaid) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d orders paid 20 s after the database came back", countOrders(t, db, order.StatusPaid), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("backlog drained %v after the database came back", time.Since(restored).Round(100*time.Millisecond))
	if st := sim.Stats(t); st.TotalCharges != n || st.DuplicateReferences != 0 {
		t.Errorf("provider: %d charges, %d duplicates; want %d and 0", st.TotalCharges, st.DuplicateReferences, n)
	}
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitStatus polls a running process's endpoint until it answers want.
func waitStatus(t *testing.T, url string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for got := status(t, url); got != want; got = status(t, url) {
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %d after %v, want %d", url, got, within, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
