package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
)

// TestProbeLeaseHasOneHolder: however many processes ask at once when the
// open state ends, one gets the lease; once it expires, another may.
func TestProbeLeaseHasOneHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	if _, err := write(ctx, pool, opened, "payment", "opener", 0.001); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE breaker_states SET until = now() - interval '1 ms'`); err != nil {
		t.Fatal(err)
	}
	var winners atomic.Int64
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			won, err := write(ctx, pool, takeLease, "payment", fmt.Sprintf("p%d", i), 60.0)
			if err != nil {
				t.Error(err)
			}
			if won {
				winners.Add(1)
			}
		})
	}
	wg.Wait()
	if got := winners.Load(); got != 1 {
		t.Fatalf("lease holders = %d, want 1", got)
	}
	if won, err := write(ctx, pool, takeLease, "payment", "late", 60.0); err != nil || won {
		t.Fatalf("a lease taken while held: won %v, err %v", won, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE breaker_states SET probe_until = now() - interval '1 ms'`); err != nil {
		t.Fatal(err)
	}
	if won, err := write(ctx, pool, takeLease, "payment", "late", 60.0); err != nil || !won {
		t.Fatalf("an expired lease: won %v, err %v; want it taken", won, err)
	}
	r, err := read(ctx, pool, "payment")
	if err != nil {
		t.Fatal(err)
	}
	if r.Holder == nil || *r.Holder != "late" {
		t.Errorf("holder = %v, want late", r.Holder)
	}
	// Only the holder's verdict counts.
	if changed, err := write(ctx, pool, probeSucceeded, "payment", "p0"); err != nil || changed {
		t.Errorf("a verdict from a process without the lease: changed %v, err %v", changed, err)
	}
	if changed, err := write(ctx, pool, probeFailed, "payment", "late", 2.0); err != nil || !changed {
		t.Errorf("the holder's failed probe: changed %v, err %v", changed, err)
	}
	if r, _ := read(ctx, pool, "payment"); r.FailedProbes != 1 || r.Holder != nil || r.Left == nil || *r.Left <= 0 {
		t.Errorf("after a failed probe: %+v, want open again, 1 failed probe, no holder", r)
	}
}
