package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/proctest"
)

const order = `{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa",
	"items":[{"sku":"SKU-1","quantity":2,"unit_price":1299},{"sku":"SKU-2","quantity":1,"unit_price":500}]}`

// TestBaselineWritesOrderAndJob checks that the baseline does the work the
// comparison credits it with: one order row and one River job row per
// request, and nothing for a request it cannot decode.
func TestBaselineWritesOrderAndJob(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p := proctest.Start(t, run, []string{"throughput", "baseline"}, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL,
	})

	post := func(body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := post(order)
	var got struct {
		ID     uuid.UUID `json:"id"`
		Status string    `json:"status"`
		Total  int64     `json:"total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || got.Status != "pending" || got.Total != 3098 {
		t.Fatalf("POST /orders: %d %+v, want 201 pending 3098", resp.StatusCode, got)
	}
	if loc := resp.Header.Get("Location"); loc != "/orders/"+got.ID.String() {
		t.Errorf("Location %q", loc)
	}

	var total int64
	var items string
	if err := pool.QueryRow(t.Context(), `SELECT total, items::text FROM orders WHERE id = $1`, got.ID).Scan(&total, &items); err != nil {
		t.Fatalf("order row: %v", err)
	}
	if total != 3098 || !strings.Contains(items, `"sku": "SKU-2"`) {
		t.Errorf("stored total %d, items %s", total, items)
	}
	var jobs int
	if err := pool.QueryRow(t.Context(), `
		SELECT count(*) FROM river_job
		WHERE kind = 'throughput_baseline' AND state = 'scheduled' AND args->>'order_id' = $1`,
		got.ID.String()).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 1 {
		t.Errorf("%d scheduled baseline jobs for the order, want 1", jobs)
	}

	if resp := post(`{"customer_id":"cus_123","extra":1}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("malformed order: status %d, want 400", resp.StatusCode)
	}
	var orders, allJobs int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM river_job)`).Scan(&orders, &allJobs); err != nil {
		t.Fatal(err)
	}
	if orders != 1 || allJobs != 1 {
		t.Errorf("%d orders, %d jobs after one good and one bad request, want 1 and 1", orders, allJobs)
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"throughput", "bogus"}, "unknown command bogus"},
		{[]string{"throughput", "-database-url", "postgres://x/y", "-duration", "1500ms"}, "wrk takes whole seconds"},
		{[]string{"throughput", "run", "-database-url", "postgres://x/y", "-runs", "0"}, "runs must be at least 1"},
		{[]string{"throughput", "-database-url", "postgres://x/y", "-checkout-env", "NOEQUALS"}, `"NOEQUALS": want KEY=VALUE`},
		{[]string{"throughput"}, "a database URL is required"},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}
