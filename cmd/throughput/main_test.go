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
	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/lab/throughput"
)

const order = `{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa",
	"items":[{"sku":"SKU-1","quantity":2,"unit_price":1299},{"sku":"SKU-2","quantity":1,"unit_price":500}]}`

// TestBaselineWritesOrderAndJob checks that the baseline does the work the
// comparison credits it with, in each mode: one order row and one River job
// row per request, and nothing for a request it cannot decode. The
// pipelined mode's hand-written job row must match the one InsertTx writes.
func TestBaselineWritesOrderAndJob(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	jobRows := map[string]string{}
	for _, mode := range throughput.BaselineModes {
		p := process.Start(t, run, []string{"throughput", "baseline"}, map[string]string{
			"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "BASELINE_MODE": mode,
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
			t.Fatalf("%s: POST /orders: %d %+v, want 201 pending 3098", mode, resp.StatusCode, got)
		}
		if loc := resp.Header.Get("Location"); loc != "/orders/"+got.ID.String() {
			t.Errorf("%s: Location %q", mode, loc)
		}

		var total int64
		var items string
		if err := pool.QueryRow(t.Context(), `SELECT total, items::text FROM orders WHERE id = $1`, got.ID).Scan(&total, &items); err != nil {
			t.Fatalf("%s: order row: %v", mode, err)
		}
		if total != 3098 || !strings.Contains(items, `"sku": "SKU-2"`) {
			t.Errorf("%s: stored total %d, items %s", mode, total, items)
		}
		// Every column that defines the job, with the order id masked.
		var jobs int
		var row string
		if err := pool.QueryRow(t.Context(), `
			SELECT count(*), min(replace(concat_ws(' | ', args, kind, queue, priority, max_attempts, attempt, state,
			       metadata, tags, unique_key, unique_states, errors, attempted_at, finalized_at,
			       scheduled_at BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'), $1, 'ID'))
			FROM river_job WHERE args->>'order_id' = $1`,
			got.ID.String()).Scan(&jobs, &row); err != nil {
			t.Fatal(err)
		}
		if jobs != 1 {
			t.Errorf("%s: %d jobs for the order, want 1", mode, jobs)
		}
		jobRows[mode] = row
	}
	if a, b := jobRows[throughput.BaselineInsertTx], jobRows[throughput.BaselinePipelined]; a != b || !strings.Contains(a, "throughput_baseline") {
		t.Errorf("job rows differ:\nInsertTx:  %s\npipelined: %s", a, b)
	}
}

// TestBaselineRejectsMalformedOrders: a body the baseline cannot decode gets
// 400 and writes nothing.
func TestBaselineRejectsMalformedOrders(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p := process.Start(t, run, []string{"throughput", "baseline"}, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL})
	for _, body := range []string{`{"customer_id":"cus_123","extra":1}`, `{"items":[]}`, `not json`} {
		resp, err := http.Post(p.URL+"/orders", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", body, resp.StatusCode)
		}
	}
	var orders, jobs int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM river_job)`).Scan(&orders, &jobs); err != nil {
		t.Fatal(err)
	}
	if orders != 0 || jobs != 0 {
		t.Errorf("%d orders, %d jobs after malformed requests, want none", orders, jobs)
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
		{[]string{"throughput", "-database-url", "postgres://x/y", "-baseline", "fast"}, `baseline "fast"`},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

func TestRunFlagsDefaults(t *testing.T) {
	t.Parallel()
	if err := run(context.Background(), []string{"throughput", "-h"}, func(string) string { return "" }, io.Discard, io.Discard); err != nil {
		t.Errorf("-h: %v, want nil", err)
	}
	// DATABASE_URL is the default database: the error is about the runs, not the URL.
	env := func(k string) string { return map[string]string{"DATABASE_URL": "postgres://x/y"}[k] }
	err := run(context.Background(), []string{"throughput", "-runs", "0"}, env, io.Discard, io.Discard)
	if err == nil || strings.Contains(err.Error(), "database URL") || !strings.Contains(err.Error(), "runs must be at least 1") {
		t.Errorf("with DATABASE_URL set: %v, want only the runs rejected", err)
	}
}
