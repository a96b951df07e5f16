package worker

import (
	"context"
	"testing"
	"time"
)

// TestUnresolvedOrderIsAskedAgainWithinAMinute (found by the chaos soak):
// past GiveUpAfter, one failed lookup (a provider 500, which does not open
// the breaker) must not park the order's job for the 10-minute retry
// ceiling, whatever the provider does next. docs/design.md, "Invariants": the provider healthy
// again → every pending_payment order settled within 60 s.
// The chaos soak (make chaos, CHARGE_GIVE_UP_AFTER=3) meets such orders
// every run; in production they are one to two hours old.
func TestUnresolvedOrderIsAskedAgainWithinAMinute(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	b.policy.GiveUpAfter = 1
	b.sim.Fault(t, `{"error_rate":1,"duration":"5s"}`) // a blip of a few seconds
	id := b.pendingOrder(t, "pm_card_visa", nil)
	b.start(t, b.payer)
	waitForJobState(t, b, id, "scheduled")
	var dueIn float64
	if err := b.db.QueryRow(context.Background(),
		`SELECT extract(epoch FROM scheduled_at - now()) FROM river_job WHERE args->>'order_id' = $1`, id.String()).Scan(&dueIn); err != nil {
		t.Fatal(err)
	}
	if due := time.Duration(dueIn * float64(time.Second)); due > time.Minute {
		t.Errorf("after one failed lookup the order's job is due in %v, the provider healthy again; want it asked again within 60 s of the blip", due.Round(time.Second))
	}
}
