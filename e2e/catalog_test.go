package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// catalogRun is what the real binaries answered while orders arrived at a
// steady rate: status counts, and how many accepted answers were marked
// stale.
type catalogRun struct {
	status      map[int]int
	stale       int
	noRetryHint int // 503s without Retry-After
}

func (r catalogRun) String() string { return fmt.Sprintf("%v, %d marked stale", r.status, r.stale) }

// placeAtRate sends n orders for items, one every interval, each with its
// own key, and tallies the answers.
func placeAtRate(t *testing.T, checkoutURL string, n int, interval time.Duration, items string) catalogRun {
	t.Helper()
	run := catalogRun{status: map[int]int{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	client := &http.Client{Timeout: 3 * time.Second}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	body := `{"customer_id":"cus_e2e","currency":"USD","payment_method":"pm_card_visa","items":` + items + `}`
	for range n {
		<-tick.C
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, checkoutURL+"/orders", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", uuid.NewString())
			resp, err := client.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				run.status[0]++
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			run.status[resp.StatusCode]++
			if strings.HasPrefix(resp.Header.Get("Catalog-Prices"), "stale") {
				run.stale++
			}
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				run.noRetryHint++
			}
		})
	}
	wg.Wait()
	return run
}

func catalogFault(t *testing.T, catalogURL, fault string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, catalogURL+"/admin/faults", strings.NewReader(fault))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("catalog fault %s: status %d", fault, resp.StatusCode)
	}
}

// TestCatalogOutageServesStalePrices holds the catalog outage on the real
// binaries: with the catalog down for 10 s after a warm-up, every order at
// 20 req/s is accepted from the stale cache and says so; with a cold cache
// the answer is 503 + Retry-After, never a 500; and no order is stored at
// a price other than the catalog's.
func TestCatalogOutageServesStalePrices(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	sim := process.StartBinary(t, binary("paymentsim"), nil, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "PAYMENTSIM_LATENCY": "20ms"})
	cat := process.StartBinary(t, binary("catalogsim"), nil, map[string]string{"HTTP_ADDR": "127.0.0.1:0"})
	checkout := process.StartBinary(t, binary("checkout"), nil, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": sim.URL,
		"CATALOG_URL": cat.URL, "CATALOG_TTL": "2s",
	})
	const sku1 = `[{"sku":"SKU-1","quantity":2,"unit_price":1299}]`

	warm := placeAtRate(t, checkout.URL, 20, 50*time.Millisecond, sku1) // 1 s at 20 req/s
	if warm.status[http.StatusCreated] != 20 || warm.stale != 0 {
		t.Fatalf("warm-up: %v, want 20 × 201 and none stale", warm)
	}

	// Down for 10 s; CATALOG_TTL is 2 s, so most of the outage is served
	// from entries past their freshness.
	catalogFault(t, cat.URL, `{"down":true,"duration":"10s"}`)
	outage := placeAtRate(t, checkout.URL, 200, 50*time.Millisecond, sku1) // 10 s at 20 req/s
	t.Logf("catalog down 10 s, 20 req/s, warm cache: %v", outage)
	if accepted := outage.status[http.StatusCreated] + outage.status[http.StatusAccepted]; accepted != 200 {
		t.Errorf("during the outage: %v, want all 200 accepted (201/202)", outage)
	}
	if outage.stale < 150 {
		t.Errorf("during the outage %d answers marked stale, want nearly all of 200 past the 2 s TTL", outage.stale)
	}

	// Cold: a SKU never asked for, with the catalog down from the start.
	catalogFault(t, cat.URL, `{"down":true,"duration":"10s"}`)
	cold := placeAtRate(t, checkout.URL, 40, 50*time.Millisecond, `[{"sku":"SKU-3","quantity":1,"unit_price":2499}]`)
	t.Logf("catalog down, cold cache: %v", cold)
	if cold.status[http.StatusServiceUnavailable] != 40 || cold.noRetryHint != 0 {
		t.Errorf("cold cache: %v (%d 503s without Retry-After), want 40 × 503 with Retry-After", cold, cold.noRetryHint)
	}
	if cold.status[http.StatusInternalServerError] != 0 || outage.status[http.StatusInternalServerError] != 0 {
		t.Errorf("a 500 during a catalog outage")
	}

	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var wrong int
	if err := db.QueryRow(context.Background(), `
		SELECT count(*) FROM orders, jsonb_array_elements(items) AS it
		WHERE NOT (it->>'sku' = 'SKU-1' AND (it->>'unit_price')::bigint = 1299)`).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Errorf("%d order lines stored at a price other than the catalog's", wrong)
	}
}
