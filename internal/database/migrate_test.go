package database_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/database/dbtest"
)

func TestMigrateIsIdempotentAndSafeConcurrently(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t) // already migrated once, through the template
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)

	for range 2 {
		if err := database.Migrate(ctx, pool, logger); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
	}

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			// Separate pools stand in for separate replicas.
			p, err := pgxpool.New(ctx, pool.Config().ConnString())
			if err != nil {
				errs[i] = err
				return
			}
			defer p.Close()
			errs[i] = database.Migrate(ctx, p, logger)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate %d: %v", i, err)
		}
	}

	var riverVersion int
	if err := pool.QueryRow(ctx, "SELECT max(version) FROM river_migration").Scan(&riverVersion); err != nil {
		t.Fatalf("read river_migration: %v", err)
	}
	if riverVersion == 0 {
		t.Errorf("river schema version = 0, want River's migrations applied")
	}
}

func TestMigrateFreshDatabase(t *testing.T) {
	t.Parallel()
	// A database created without the template: Migrate must build everything.
	pool := dbtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "DROP SCHEMA public CASCADE; CREATE SCHEMA public"); err != nil {
		t.Fatalf("empty the database: %v", err)
	}
	if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	for _, table := range []string{"orders", "idempotency_keys", "river_job"} {
		var found bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&found); err != nil || !found {
			t.Errorf("table %s after Migrate: found=%v err=%v", table, found, err)
		}
	}
}

const validOrder = `INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total, charge_id, failure_reason)
VALUES (gen_random_uuid(), $1, $2, $3, 'pm_card_visa', $4, $5, $6, $7)`

func TestOrderConstraints(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	items := `[{"sku":"SKU-1","quantity":1,"unit_price":100}]`
	str := func(s string) *string { return &s }

	tests := []struct {
		name       string
		status     string
		customer   string
		currency   string
		items      string
		total      int64
		chargeID   *string
		reason     *string
		constraint string // empty: the row is valid
	}{
		{name: "valid pending", status: "pending", customer: "cus_1", currency: "USD", items: items, total: 100},
		{name: "valid paid", status: "paid", customer: "cus_1", currency: "EUR", items: items, total: 100, chargeID: str("ch_1")},
		{name: "valid failed", status: "payment_failed", customer: "cus_1", currency: "VND", items: items, total: 0, reason: str("card_declined")},
		{name: "unknown status", status: "shipped", customer: "cus_1", currency: "USD", items: items, total: 100, constraint: "orders_status_known"},
		{name: "negative total", status: "pending", customer: "cus_1", currency: "USD", items: items, total: -1, constraint: "orders_total_non_negative"},
		{name: "empty customer", status: "pending", customer: "", currency: "USD", items: items, total: 1, constraint: "orders_customer_id_length"},
		{name: "lowercase currency", status: "pending", customer: "c", currency: "usd", items: items, total: 1, constraint: "orders_currency_iso4217"},
		{name: "items not array", status: "pending", customer: "c", currency: "USD", items: `{}`, total: 1, constraint: "orders_items_array"},
		{name: "no items", status: "pending", customer: "c", currency: "USD", items: `[]`, total: 1, constraint: "orders_items_array"},
		{name: "paid without charge", status: "paid", customer: "c", currency: "USD", items: items, total: 1, constraint: "orders_charge_id_iff_paid"},
		{name: "charge while pending", status: "pending", customer: "c", currency: "USD", items: items, total: 1, chargeID: str("ch_1"), constraint: "orders_charge_id_iff_paid"},
		{name: "failed without reason", status: "payment_failed", customer: "c", currency: "USD", items: items, total: 1, constraint: "orders_failure_reason_iff_failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := pool.Exec(context.Background(), validOrder, tt.status, tt.customer, tt.currency, tt.items, tt.total, tt.chargeID, tt.reason)
			checkConstraint(t, err, tt.constraint)
		})
	}
}

func TestIdempotencyKeyConstraints(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	const insert = `INSERT INTO idempotency_keys (key, request_fingerprint, response_status, response_content_type, response_body)
		VALUES ($1, $2, $3, $4, $5)`
	fp := make([]byte, 32)
	status, ctype, body := 201, "application/json", []byte(`{}`)

	if _, err := pool.Exec(ctx, insert, "key-1", fp, nil, nil, nil); err != nil {
		t.Fatalf("insert in-progress key: %v", err)
	}
	tests := []struct {
		name       string
		key        string
		fp         []byte
		status     *int
		ctype      *string
		body       []byte
		constraint string
	}{
		{name: "duplicate key", key: "key-1", fp: fp, constraint: "idempotency_keys_pkey"},
		{name: "empty key", key: "", fp: fp, constraint: "idempotency_keys_key_format"},
		{name: "key with space", key: "a b", fp: fp, constraint: "idempotency_keys_key_format"},
		{name: "key too long", key: strings.Repeat("k", 256), fp: fp, constraint: "idempotency_keys_key_format"},
		{name: "key of 255 characters", key: strings.Repeat("k", 255), fp: fp},
		{name: "key of every visible ASCII character", key: visibleASCII(), fp: fp},
		{name: "key with tab", key: "a\tb", fp: fp, constraint: "idempotency_keys_key_format"},
		{name: "key with DEL", key: "a\x7fb", fp: fp, constraint: "idempotency_keys_key_format"},
		{name: "key with non-ASCII letter", key: "clé", fp: fp, constraint: "idempotency_keys_key_format"},
		{name: "key of 128 two-byte characters", key: strings.Repeat("é", 128), fp: fp, constraint: "idempotency_keys_key_format"},
		{name: "short fingerprint", key: "key-2", fp: []byte{1}, constraint: "idempotency_keys_fingerprint_sha256"},
		{name: "status without body", key: "key-3", fp: fp, status: &status, ctype: &ctype, constraint: "idempotency_keys_response_complete"},
		{name: "complete response", key: "key-4", fp: fp, status: &status, ctype: &ctype, body: body},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := pool.Exec(ctx, insert, tt.key, tt.fp, tt.status, tt.ctype, tt.body)
			checkConstraint(t, err, tt.constraint)
		})
	}
}

// visibleASCII is every character a key may hold, 0x21 to 0x7e.
func visibleASCII() string {
	var b strings.Builder
	for c := byte(0x21); c <= 0x7e; c++ {
		b.WriteByte(c)
	}
	return b.String()
}

func checkConstraint(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("insert failed: %v, want success", err)
	case want != "" && err == nil:
		t.Fatalf("insert succeeded, want violation of %s", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("got error %v, want violation of %s", err, want)
	}
}
