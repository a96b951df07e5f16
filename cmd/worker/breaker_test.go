package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/fleet"
	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// TestForcedOpenSnoozesChargesUntilCleared: with the payment breaker
// forced open for the fleet, a worker with a backlog due snoozes every job
// and calls the provider not once, though the provider is healthy; cleared,
// it drains the backlog.
func TestForcedOpenSnoozesChargesUntilCleared(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	sim := simtest.Start(t, 0)
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	sim.Fault(t, `{"down":true}`)
	const n = 10
	placeOrders(t, db, sim.URL, n)
	sim.Reset(t)
	sim.Heal(t)

	if err := fleet.Force(context.Background(), db, "payment", 0, "test"); err != nil {
		t.Fatal(err)
	}
	w := process.Start(t, run, []string{"worker"}, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": sim.URL})
	// The jobs come due within ~1.5 s, River's scheduler promotes them
	// within 5 s more: wait until every one has been snoozed at least once.
	deadline := time.Now().Add(20 * time.Second)
	for metric(t, w.URL, `checkout_charge_jobs_total{outcome="snoozed"}`) < n {
		if time.Now().After(deadline) {
			t.Fatalf("snoozed jobs = %v after 20s, want %d", metric(t, w.URL, `checkout_charge_jobs_total{outcome="snoozed"}`), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := sim.Stats(t).TotalCharges; got != 0 {
		t.Errorf("provider charges while forced open = %d, want 0", got)
	}
	if got := metric(t, w.URL, `resilience_breaker_source{name="payment-worker",source="forced"}`); got != 1 {
		t.Errorf(`resilience_breaker_source{source="forced"} = %v, want 1`, got)
	}

	if _, err := fleet.Clear(context.Background(), db, "payment", "test"); err != nil {
		t.Fatal(err)
	}
	cleared := time.Now()
	// A job snoozes for at most the forced slice (10 s) plus half of it as
	// jitter, then River's scheduler may take 5 s to promote it.
	deadline = cleared.Add(30 * time.Second)
	for countOrders(t, db, order.StatusPaid) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d orders paid 30s after clearing", countOrders(t, db, order.StatusPaid), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("backlog of %d paid %v after clearing", n, time.Since(cleared).Round(100*time.Millisecond))
	if st := sim.Stats(t); st.TotalCharges != n || st.DuplicateReferences != 0 {
		t.Errorf("provider: %d charges, %d charged twice; want %d and 0", st.TotalCharges, st.DuplicateReferences, n)
	}
}
