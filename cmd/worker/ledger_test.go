package main

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// TestSlowLedgerPagesLeaveTheChargeBreakerClosed: a healthy provider whose
// charge list answers a page in 450 ms — slower than a charge may be, well
// within what a page of a hundred charges may take — is walked again and
// again, and the worker's charge breaker, which the fleet shares, stays
// closed: the walk's reads go through a stack of their own.
func TestSlowLedgerPagesLeaveTheChargeBreakerClosed(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	sim := simtest.Start(t, 0)
	// Charges without an order, which every walk reads again within its
	// look-back, so the charges checked count the walks.
	const charges = 3
	for range charges {
		sim.Charge(t, uuid.NewString(), uuid.NewString())
	}
	sim.Fault(t, `{"latency":"450ms"}`)
	w := process.Start(t, run, []string{"worker"}, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": sim.URL,
		"LEDGER_RECONCILE_INTERVAL": "1s",
	})
	// The charge breaker would trip on 4 slow calls of 4 (the worker's
	// minimum): wait for six walks.
	const walks = 6
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, w.URL, "checkout_ledger_charges_checked_total") < walks*charges && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, sample := range []string{
		`resilience_calls_total{name="payment-worker",outcome="slow"}`,
		`resilience_breaker_transitions_total{from="closed",name="payment-worker",to="open"}`,
		`resilience_breaker_state{name="payment-worker"}`,
	} {
		if got := metric(t, w.URL, sample); got != 0 {
			t.Errorf("%s = %v while the walk read 450 ms pages, want 0", sample, got)
		}
	}
	if got := metric(t, w.URL, "checkout_ledger_charges_checked_total"); got < walks*charges {
		t.Errorf("charges checked = %v after 30s, want %d walks of %d", got, walks, charges)
	}
}
