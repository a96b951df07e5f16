package database_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// A migration that waits for another one is not cut short by the server's
// statement timeout: replicas started together each run migrate, and the
// first may take longer than DB_STATEMENT_TIMEOUT.
func TestMigrateWaitsForAnotherOneLongerThanTheStatementTimeout(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(0x636b6f7574)); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "200"
	waiting, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	done := make(chan error, 1)
	go func() { done <- database.Migrate(ctx, waiting, slog.New(slog.DiscardHandler)) }()
	time.Sleep(time.Second) // the other migration holds the lock for 5 × the statement timeout
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(0x636b6f7574)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Migrate after waiting for the lock: %v", err)
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

// TestMigrateWaitsForALateDatabase is the first start of a compose stack on
// a slow machine: `checkout migrate` starts while PostgreSQL still refuses
// TCP connections (the official image's first initialisation listens on
// its Unix socket only). It must retry, and migrate once the server listens.
func TestMigrateWaitsForALateDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := dbtest.Pool(t)
	if _, err := direct.Exec(ctx, "DROP SCHEMA public CASCADE; CREATE SCHEMA public"); err != nil {
		t.Fatalf("empty the database: %v", err)
	}
	proxy := dbtest.NewProxy(t, direct.Config().ConnString())
	proxy.Refuse()
	pool, err := database.Open(ctx, database.Config{URL: proxy.URL(), ConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	retries := &retryLog{retried: make(chan string, 100)}
	done := make(chan error, 1)
	go func() {
		logger := slog.New(retries)
		if err := database.AwaitConnection(ctx, pool, time.Minute, logger); err != nil {
			done <- err
			return
		}
		done <- database.Migrate(ctx, pool, logger)
	}()
	// Open the port only after two refused attempts, so the test shows
	// retries rather than a lucky first try.
	for range 2 {
		select {
		case msg := <-retries.retried:
			if !strings.Contains(msg, "connection refused") {
				t.Errorf("retry logged %q, want the refused connection", msg)
			}
		case err := <-done:
			t.Fatalf("AwaitConnection returned %v before the database listened", err)
		}
	}
	proxy.Restore()
	if err := <-done; err != nil {
		t.Fatalf("migrate after the database came up: %v", err)
	}
	var found bool
	if err := direct.QueryRow(ctx, "SELECT to_regclass('orders') IS NOT NULL AND to_regclass('river_job') IS NOT NULL").Scan(&found); err != nil || !found {
		t.Errorf("schema after migrate: found=%v err=%v", found, err)
	}
}

func TestAwaitConnectionGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name        string
		within      time.Duration
		wantErr     string
		wantRetries bool
	}{
		{name: "after its bound", within: 600 * time.Millisecond, wantErr: "database not reachable within 600ms", wantRetries: true},
		{name: "at once with no wait", within: 0, wantErr: "database not reachable within 0s (1 attempts)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			proxy := dbtest.NewProxy(t, dbtest.URL(t))
			proxy.Refuse() // never restored
			pool, err := database.Open(ctx, database.Config{URL: proxy.URL(), ConnectTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			retries := &retryLog{retried: make(chan string, 100)}
			// Far past the bound: a wait that never gives up fails here
			// instead of hanging the test binary.
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()

			start := time.Now()
			err = database.AwaitConnection(ctx, pool, tt.within, slog.New(retries))
			elapsed := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("got error %v, want one containing %q and wrapping ECONNREFUSED", err, tt.wantErr)
			}
			if elapsed < tt.within {
				t.Errorf("gave up after %s, before its bound of %s", elapsed, tt.within)
			}
			if got := len(retries.retried) > 0; got != tt.wantRetries {
				t.Errorf("retried = %v, want %v", got, tt.wantRetries)
			}
		})
	}
}

// TestAwaitConnectionFailsFastOnWhatWaitingCannotFix: a database that does
// not exist will not appear by retrying, so the error comes at once.
func TestAwaitConnectionFailsFastOnWhatWaitingCannotFix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, err := url.Parse(dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database"
	pool, err := database.Open(ctx, database.Config{URL: u.String(), ConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	retries := &retryLog{retried: make(chan string, 100)}
	err = database.AwaitConnection(ctx, pool, 10*time.Second, slog.New(retries))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
		t.Fatalf("got error %v, want invalid_catalog_name (3D000)", err)
	}
	if n := len(retries.retried); n != 0 {
		t.Errorf("retried %d times, want none", n)
	}
}

// retryLog is a slog handler that reports each "retrying" record of
// AwaitConnection, with its error, on retried.
type retryLog struct {
	retried chan string
}

func (*retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *retryLog) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h *retryLog) WithGroup(string) slog.Handler          { return h }

func (h *retryLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "retrying") {
		return nil
	}
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	select {
	case h.retried <- msg:
	default: // a test that reads only the first few must not block the caller
	}
	return nil
}
