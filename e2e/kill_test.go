package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

const orderBody = `{"customer_id":"cus_e2e","currency":"USD","payment_method":"pm_card_visa",` +
	`"items":[{"sku":"SKU-1","quantity":2,"unit_price":1299}]}`

// TestCheckoutKilledMidRequestLosesNoOrder sends a steady stream of orders,
// SIGKILLs checkout while requests are in flight (several of them inside a
// provider call), then lets a worker settle what the dead process left
// behind. Invariants 1–3: every acknowledged order is in Postgres, every
// order ends terminal without a manual step, and no order is charged twice.
func TestCheckoutKilledMidRequestLosesNoOrder(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	// 300 ms per charge keeps several requests inside the provider call at
	// any moment, below the 400 ms slow-call threshold.
	sim := process.StartBinary(t, binary("paymentsim"), nil, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "PAYMENTSIM_LATENCY": "300ms",
	})
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": sim.URL}
	checkout := process.StartBinary(t, binary("checkout"), nil, env)

	acked := make(chan string, 100)
	var wg sync.WaitGroup
	tick := time.NewTicker(50 * time.Millisecond) // 20 req/s
	defer tick.Stop()
	killAt := time.After(1200 * time.Millisecond)
	for i := 0; ; i++ {
		select {
		case <-tick.C:
			wg.Go(func() {
				if id, _ := placeOrder(checkout.URL, fmt.Sprintf("kill-%d", i)); id != "" {
					acked <- id
				}
			})
			continue
		case <-killAt:
		}
		break
	}
	checkout.Kill()
	wg.Wait()
	close(acked)
	if len(acked) == 0 {
		t.Fatal("no order was acknowledged before the kill; the test proves nothing")
	}

	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	var inFlight int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE status = 'pending'`).Scan(&inFlight); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d orders acknowledged, %d left pending by the killed process", len(acked), inFlight)
	if inFlight == 0 {
		t.Error("the kill left no pending order: it did not interrupt a charge, so the test proves less than it claims")
	}

	process.StartBinary(t, binary("worker"), nil, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": sim.URL,
	})
	// The killed checkout wrote no job for the charge it interrupted: the
	// worker's sweep makes one for an order still pending after SWEEP_AFTER
	// (10 s by default), and the worker then charges it.
	waitAllTerminal(t, db, 45*time.Second)

	for id := range acked {
		var status string
		if err := db.QueryRow(context.Background(), `SELECT status FROM orders WHERE id = $1`, id).Scan(&status); err != nil {
			t.Errorf("acknowledged order %s not in the database: %v", id, err)
		}
	}
	stats := simStats(t, sim.URL)
	var paid int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE status = 'paid'`).Scan(&paid); err != nil {
		t.Fatal(err)
	}
	if stats.DuplicateReferences != 0 {
		t.Errorf("%d orders charged more than once", stats.DuplicateReferences)
	}
	if stats.TotalCharges != paid {
		t.Errorf("provider recorded %d charges for %d paid orders", stats.TotalCharges, paid)
	}
}

// placeOrder posts one order and returns the answer's status (0 when none
// came) and the order's id when the API acknowledged it (201, 202 or 402 —
// the answers that promise the order exists), else "".
func placeOrder(baseURL, key string) (id string, status int) {
	req, _ := http.NewRequest(http.MethodPost, baseURL+"/orders", bytes.NewBufferString(orderBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Do(req)
	if err != nil {
		return "", 0
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", resp.StatusCode
	}
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusAccepted, http.StatusPaymentRequired:
	default:
		return "", resp.StatusCode
	}
	var o struct {
		ID      string `json:"id"`       // order (201, 202)
		OrderID string `json:"order_id"` // problem (402)
	}
	if err := json.Unmarshal(body, &o); err != nil {
		return "", resp.StatusCode
	}
	return cmp.Or(o.ID, o.OrderID), resp.StatusCode
}

func waitAllTerminal(t *testing.T, db *pgxpool.Pool, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var open int
		err := db.QueryRow(context.Background(),
			`SELECT count(*) FROM orders WHERE status IN ('pending', 'pending_payment')`).Scan(&open)
		if err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orders still not terminal after %v", open, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type providerStats struct {
	TotalCharges        int            `json:"total_charges"`
	ChargesByReference  map[string]int `json:"charges_by_reference"`
	DuplicateReferences int            `json:"duplicate_references"`
	MaxInFlight         int            `json:"max_in_flight"`
}

func simStats(t *testing.T, simURL string) providerStats {
	t.Helper()
	resp, err := http.Get(simURL + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st providerStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}
