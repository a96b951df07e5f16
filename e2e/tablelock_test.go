package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// TestA503StoresNothingWhileTheDatabaseIsSlow holds invariant 11 from
// outside: while orders arrive at 30/s, another session locks the orders
// table (LOCK TABLE orders IN SHARE MODE, as a migration or a long report
// might) five times for 1.6–2.5 s — long enough for requests to give up.
// Once the worker's sweep has had its chance, no request answered 503 has a
// key or an order, and the provider holds no charge for one; every order
// acknowledged is stored, and none is charged twice.
func TestA503StoresNothingWhileTheDatabaseIsSlow(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	sim := process.StartBinary(t, binary("paymentsim"), nil, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "PAYMENTSIM_LATENCY": "100ms",
	})
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": sim.URL}
	checkout := process.StartBinary(t, binary("checkout"), nil, env)
	process.StartBinary(t, binary("worker"), nil, env)
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)

	locksDone := make(chan struct{})
	go func() {
		defer close(locksDone)
		for _, hold := range []time.Duration{1600, 1800, 2000, 2200, 2500} {
			time.Sleep(800 * time.Millisecond)
			if err := lockOrders(db, hold*time.Millisecond); err != nil {
				t.Errorf("lock the orders table: %v", err)
				return
			}
		}
	}()
	type answer struct {
		key, id string
		status  int
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
	)
	tick := time.NewTicker(time.Second / 30)
	for i := 0; ; i++ {
		select {
		case <-locksDone:
		case <-tick.C:
			wg.Go(func() {
				key := fmt.Sprintf("lock-%d", i)
				id, status := placeOrder(checkout.URL, key)
				mu.Lock()
				answers = append(answers, answer{key, id, status})
				mu.Unlock()
			})
			continue
		}
		break
	}
	tick.Stop()
	wg.Wait()
	waitAllTerminal(t, db, 60*time.Second) // the sweep charges whatever a request left

	byStatus := map[int]int{}
	for _, a := range answers {
		byStatus[a.status]++
		var keys int
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys WHERE key = $1`, a.key).Scan(&keys); err != nil {
			t.Fatal(err)
		}
		switch {
		case a.status == 503 && keys != 0:
			t.Errorf("request %s was answered 503, yet its key is stored", a.key)
		case a.id != "" && keys != 1:
			t.Errorf("request %s was acknowledged (%d), yet its key is not stored", a.key, a.status)
		}
	}
	t.Logf("answers by status: %v", byStatus)
	if byStatus[503] == 0 {
		t.Fatal("no request was answered 503: the locks did not make the database slow enough to prove anything")
	}
	stats := simStats(t, sim.URL)
	for ref := range stats.ChargesByReference {
		var stored bool
		if err := db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM orders WHERE id::text = $1)`, ref).Scan(&stored); err != nil || !stored {
			t.Errorf("the provider charged %s, which is no stored order (%v)", ref, err)
		}
	}
	if stats.DuplicateReferences != 0 {
		t.Errorf("%d orders charged more than once", stats.DuplicateReferences)
	}
}

// lockOrders holds LOCK TABLE orders IN SHARE MODE for hold: every write
// to orders waits for it, reads do not.
func lockOrders(db *pgxpool.Pool, hold time.Duration) error {
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE orders IN SHARE MODE`); err != nil {
		return err
	}
	time.Sleep(hold)
	return tx.Rollback(ctx)
}
