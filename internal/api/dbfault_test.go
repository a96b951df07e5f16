package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/catalog"
	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
)

// TestDatabaseOutage cuts checkout off its database (a proxy blackholes the
// connections; the shared PostgreSQL server keeps running for other tests)
// and holds it to the numbers of docs/design.md, "A 503 stores nothing": 503 + Retry-After within 2 s,
// /ready 503, /health unaffected, and recovery without a restart.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	b, proxy := setup(t, options{proxy: true})
	if r := b.post(t, newKey(), validBody); r.status != http.StatusCreated {
		t.Fatalf("before the outage: %v, want 201", r)
	}

	proxy.Cut()
	key := newKey()
	start := time.Now()
	r := b.post(t, key, validBody)
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("503 took %v, want ≤ 2 s", elapsed)
	}
	if got, want := r.status, http.StatusServiceUnavailable; got != want {
		t.Fatalf("POST during the outage = %v, want %d", r, want)
	}
	decodeProblem(t, r)
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After = %q, want a positive number of seconds", r.header.Get("Retry-After"))
	}
	if r := b.do(t, http.MethodGet, "/orders/0190a6f5-8b5e-7c4e-9f00-000000000000", ""); r.status != http.StatusServiceUnavailable {
		t.Errorf("GET order during the outage = %v, want 503 (not 404: we cannot know)", r)
	}
	start = time.Now()
	if r := b.do(t, http.MethodGet, "/ready", ""); r.status != http.StatusServiceUnavailable {
		t.Errorf("/ready during the outage = %v, want 503", r)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("/ready took %v, want ≤ 2 s", elapsed)
	}
	start = time.Now()
	if r := b.do(t, http.MethodGet, "/health", ""); r.status != http.StatusOK {
		t.Errorf("/health during the outage = %v, want 200", r)
	}
	if elapsed := time.Since(start); elapsed > 100*time.Millisecond {
		t.Errorf("/health took %v during the outage, want milliseconds", elapsed)
	}

	proxy.Restore()
	// The 503 stored nothing, so the client's retry with the same key
	// proceeds once the pool has reconnected.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r = b.post(t, key, validBody)
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the pool's reconnection, not our own state
	}
	if got, want := r.status, http.StatusCreated; got != want {
		t.Fatalf("retry after the database came back = %v, want %d within 20 s", r, want)
	}
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("retry after a 503 was a replay; the 503 must not be stored")
	}
	if r := b.do(t, http.MethodGet, "/ready", ""); r.status != http.StatusOK {
		t.Errorf("/ready after recovery = %v, want 200", r)
	}
	if orders, keys := b.rows(t); orders != 2 || keys != 2 {
		t.Errorf("rows: %d orders, %d keys; want 2 and 2", orders, keys)
	}
}

// cutAfterCharge charges through Payer, then cuts checkout off its
// database before the answer returns: the order is stored and charged, and
// its settle meets a database that is gone.
type cutAfterCharge struct {
	order.Payer
	proxy *dbtest.Proxy
}

func (p *cutAfterCharge) Charge(ctx context.Context, req order.ChargeRequest) (order.Receipt, error) {
	r, err := p.Payer.Charge(ctx, req)
	p.proxy.Cut()
	return r, err
}

// TestAStoredOrderIsNeverAnswered503: a database that fails after the
// order's first write committed — here, under the settle of a charge that
// succeeded — gets the answer 202 with the order as stored, never a 503,
// which would tell the client nothing was stored (and a client who then
// orders again with a new key would pay twice).
func TestAStoredOrderIsNeverAnswered503(t *testing.T) {
	t.Parallel()
	payer := &cutAfterCharge{}
	b, proxy := setup(t, options{proxy: true, wrapPayer: func(p order.Payer) order.Payer { payer.Payer = p; return payer }})
	payer.proxy = proxy

	r := b.post(t, newKey(), validBody)
	if r.status != http.StatusAccepted {
		t.Fatalf("database lost after the charge: %v; want 202", r)
	}
	var o struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(r.body, &o); err != nil || o.Status != "pending" {
		t.Fatalf("202 body %s (%v); want the order as stored, pending", r.body, err)
	}
	proxy.Restore()
	var status string
	if err := b.db.QueryRow(context.Background(), `SELECT status FROM orders WHERE id = $1`, o.ID).Scan(&status); err != nil {
		t.Fatalf("the 202's order is not stored: %v", err)
	}
	if charges := b.sim.Stats().TotalCharges; charges != 1 {
		t.Errorf("provider charges = %d, want 1", charges)
	}
}

// TestARetryOfAStoredOrderIsNeverAnswered503: a first request stores its
// order and leaves its key without an answer — a 502 with fallback off
// stands in here for an answer lost on the way — and the client retries
// with the same key. The order exists and the sweep will charge it, so no
// answer may say nothing was stored, nor send the client to a new key:
// with the catalog refusing the prices now, the stored order is answered
// (its charge resumed); with its key's lookup failing, the answer is 504
// outcome-unknown.
func TestARetryOfAStoredOrderIsNeverAnswered503(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault func(t *testing.T, b *bundle, key string)
		want  func(t *testing.T, r response, stored string)
	}{
		{"prices changed since", func(t *testing.T, b *bundle, _ string) {
			b.catalog.SetPrice("SKU-1", catalogsim.Price{UnitPrice: 1499, Currency: "USD"})
		}, answersTheStoredOrder},
		{"catalog down", func(t *testing.T, b *bundle, _ string) { catalogDown(t, b) }, answersTheStoredOrder},
		{"key lookup too slow", func(t *testing.T, b *bundle, key string) {
			// A lock held on the key keeps the lookup waiting past DB_TX_TIMEOUT.
			hold, err := b.db.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = hold.Rollback(context.Background()) })
			if _, err := hold.Exec(context.Background(), `SELECT FROM idempotency_keys WHERE key = $1 FOR UPDATE`, key); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, r response, _ string) {
			if r.status != http.StatusGatewayTimeout || decodeProblem(t, r).Type != "urn:problem-type:checkout:outcome-unknown" || r.header.Get("Retry-After") == "" {
				t.Errorf("retry whose key lookup timed out = %v; want 504 outcome-unknown with Retry-After", r)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ocfg := order.DefaultConfig()
			// Long enough for the first write on a machine busy with the
			// whole suite; the held lock waits it out.
			ocfg.Fallback, ocfg.DBTimeout = false, 2*time.Second
			ccfg := catalog.DefaultConfig()
			ccfg.TTL, ccfg.MaxStaleness = time.Millisecond, time.Millisecond // every check asks the catalog
			b, _ := setup(t, options{orders: &ocfg, catalog: &ccfg})
			key := newKey()
			b.admin(t, http.MethodPost, "/admin/faults", `{"down":true}`)
			first := b.post(t, key, validBody)
			if first.status != http.StatusBadGateway {
				t.Fatalf("first request with the provider down = %v, want 502 (stored, unanswered)", first)
			}
			var stored string
			if err := b.db.QueryRow(context.Background(), `SELECT order_id::text FROM idempotency_keys WHERE key = $1`, key).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			b.admin(t, http.MethodDelete, "/admin/faults", "")
			tt.fault(t, b, key)
			tt.want(t, b.post(t, key, validBody), stored)
			if orders, keys := b.rows(t); orders != 1 || keys != 1 {
				t.Errorf("rows: %d orders, %d keys; want the first request's 1 and 1", orders, keys)
			}
		})
	}
}

// answersTheStoredOrder: the retry took the stored order over and charged it.
func answersTheStoredOrder(t *testing.T, r response, stored string) {
	t.Helper()
	if r.status != http.StatusCreated {
		t.Fatalf("retry = %v; want 201 for the stored order", r)
	}
	if o := decodeOrder(t, r); o.ID != stored || o.Status != "paid" {
		t.Errorf("retry answered order %s (%s), want the stored %s, paid", o.ID, o.Status, stored)
	}
}
