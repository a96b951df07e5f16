package idempotency_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/idempotency"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header, want string
		ok           bool
	}{
		{"abc", "abc", true},
		{`"abc"`, "abc", true}, // the draft's structured-field string form
		{"order-42:v1", "order-42:v1", true},
		{strings.Repeat("k", 255), strings.Repeat("k", 255), true},
		{"", "", false},
		{`""`, "", false},
		{strings.Repeat("k", 256), "", false},
		{"a b", "", false},
		{"tab\tkey", "", false},
		{"clé", "", false},
		{"\x7f", "", false},
	}
	for _, tt := range tests {
		got, err := idempotency.ParseKey(tt.header)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q, ok=%v", tt.header, got, err, tt.want, tt.ok)
		}
	}
}

func fingerprint(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// claim runs ClaimKey in its own transaction, as the checkout flow does.
func claim(t *testing.T, db *pgxpool.Pool, key string, fp []byte, lockUntil time.Time) idempotency.Claim {
	t.Helper()
	var c idempotency.Claim
	err := pgx.BeginFunc(context.Background(), db, func(tx pgx.Tx) error {
		var err error
		c, err = idempotency.ClaimKey(context.Background(), tx, key, fp, lockUntil)
		return err
	})
	if err != nil {
		t.Fatalf("ClaimKey: %v", err)
	}
	return c
}

func TestClaimKeyLifecycle(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	later := time.Now().Add(time.Minute)

	if got := claim(t, db, "k", fingerprint(1), later).State; got != idempotency.Claimed {
		t.Fatalf("first claim: state %v, want Claimed", got)
	}
	if got := claim(t, db, "k", fingerprint(1), later).State; got != idempotency.InProgress {
		t.Errorf("claim while locked: state %v, want InProgress", got)
	}
	if got := claim(t, db, "k", fingerprint(2), later).State; got != idempotency.Mismatch {
		t.Errorf("claim with another request: state %v, want Mismatch", got)
	}

	// Released without a response (a 504 without fallback): resumable at once.
	if err := idempotency.Release(ctx, db, "k"); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, db, "k", fingerprint(1), later).State; got != idempotency.Resumed {
		t.Errorf("claim after release: state %v, want Resumed", got)
	}

	want := idempotency.Response{Status: 201, ContentType: "application/json", Location: "/orders/1", Body: []byte(`{"id":"1"}`)}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return idempotency.Finish(ctx, tx, "k", want) })
	if err != nil {
		t.Fatal(err)
	}
	c := claim(t, db, "k", fingerprint(1), later)
	if c.State != idempotency.Finished {
		t.Fatalf("claim after finish: state %v, want Finished", c.State)
	}
	if c.Response.Status != want.Status || c.Response.ContentType != want.ContentType ||
		c.Response.Location != want.Location || !bytes.Equal(c.Response.Body, want.Body) {
		t.Errorf("stored response = %+v, want %+v", c.Response, want)
	}
	if got := claim(t, db, "k", fingerprint(2), later).State; got != idempotency.Mismatch {
		t.Errorf("finished key with another request: state %v, want Mismatch", got)
	}
}

func TestExpiredLockIsResumedWithItsOrder(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	// A request whose process died: its lock has passed.
	claim(t, db, "k", fingerprint(1), time.Now().Add(-time.Second))
	orderID := uuid.New()
	if _, err := db.Exec(ctx, `INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total)
		VALUES ($1, 'pending', 'c', 'USD', 'pm', '[{}]', 1)`, orderID); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return idempotency.AttachOrder(ctx, tx, "k", orderID) })
	if err != nil {
		t.Fatal(err)
	}
	c := claim(t, db, "k", fingerprint(1), time.Now().Add(time.Minute))
	if c.State != idempotency.Resumed || c.OrderID != orderID {
		t.Errorf("claim after the lock expired = %v with order %v, want Resumed with %v", c.State, c.OrderID, orderID)
	}
	if got := claim(t, db, "k", fingerprint(1), time.Now().Add(time.Minute)).State; got != idempotency.InProgress {
		t.Errorf("a second retry while the first resumed: state %v, want InProgress", got)
	}
}

func TestPruneDeletesOnlyExpiredUnlockedKeys(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	insert := `INSERT INTO idempotency_keys (key, request_fingerprint, locked_until, created_at) VALUES ($1, $2, $3, $4)`
	old := time.Now().Add(-25 * time.Hour)
	for _, k := range []struct {
		key     string
		locked  *time.Time
		created time.Time
	}{
		{"old", nil, old},
		{"old-locked", ptr(time.Now().Add(time.Minute)), old},
		{"fresh", nil, time.Now().Add(-23 * time.Hour)},
	} {
		if _, err := db.Exec(ctx, insert, k.key, fingerprint(1), k.locked, k.created); err != nil {
			t.Fatal(err)
		}
	}
	w := idempotency.NewPruneWorker(db, time.Hour, slog.New(slog.DiscardHandler)) // raised to 24 h
	if err := w.Work(ctx, nil); err != nil {
		t.Fatalf("prune: %v", err)
	}
	rows, err := db.Query(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(left, ","), "fresh,old-locked"; got != want {
		t.Errorf("keys after pruning = %s, want %s", got, want)
	}
}

func ptr[T any](v T) *T { return &v }
