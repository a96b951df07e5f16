package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
)

// TestReconcileListsTheFindings: `checkout reconcile` prints every finding
// the ledger reconciliation stored, with what a person needs to act on it.
func TestReconcileListsTheFindings(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	cli := func() string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), []string{"checkout", "reconcile"}, func(k string) string { return env[k] }, &out, io.Discard); err != nil {
			t.Fatalf("checkout reconcile: %v", err)
		}
		return out.String()
	}
	if out := cli(); !strings.Contains(out, "no findings") {
		t.Errorf("with no findings: %q", out)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO ledger_findings (charge_id, reference, amount, currency, charged_at, kind)
		VALUES ('ch_LOST', '0193a000-0000-7000-8000-000000000001', 2598, 'USD', now(), 'no_order')`); err != nil {
		t.Fatal(err)
	}
	out := cli()
	for _, want := range []string{"no_order", "ch_LOST", "0193a000-0000-7000-8000-000000000001", "2598 USD"} {
		if !strings.Contains(out, want) {
			t.Errorf("checkout reconcile printed %q, want %q in it", out, want)
		}
	}
}
