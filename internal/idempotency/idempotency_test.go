package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/idempotency"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header, want string
		wantErr      bool
	}{
		{header: "abc", want: "abc"},
		{header: `"abc"`, want: "abc"},
		{header: `"a"b"`, want: `a"b`},
		{header: `"`, want: `"`},
		{header: "!~", want: "!~"},
		{header: strings.Repeat("k", 255), want: strings.Repeat("k", 255)},
		{header: `"` + strings.Repeat("k", 255) + `"`, want: strings.Repeat("k", 255)},
		{header: "", wantErr: true},
		{header: `""`, wantErr: true},
		{header: strings.Repeat("k", 256), wantErr: true},
		{header: "a b", wantErr: true},
		{header: "a\tb", wantErr: true},
		{header: "a\x7fb", wantErr: true},
		{header: "clé", wantErr: true},
	}
	for _, tt := range tests {
		got, err := idempotency.ParseKey(tt.header)
		if tt.wantErr {
			if !errors.Is(err, idempotency.ErrInvalidKey) {
				t.Errorf("ParseKey(%q) = %q, %v; want ErrInvalidKey", tt.header, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tt.header, got, err, tt.want)
		}
	}
}

// claim does what the checkout flow does with a key: try to claim it in the
// statement that creates an order, and look the key up when it is taken.
// insertKey stores key as a request claims it, locked for lockFor
// (negative: a lock that has already expired).
func insertKey(t *testing.T, db *pgxpool.Pool, key string, lockFor time.Duration) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
		INSERT INTO idempotency_keys (key, request_fingerprint, locked_until)
		VALUES ($1, $2, now() + make_interval(secs => $3))`, key, bytes.Repeat([]byte{1}, 32), lockFor.Seconds())
	if err != nil {
		t.Fatalf("insert key %q: %v", key, err)
	}
}

func TestDeleteExpired(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	insertKey(t, db, "old", -time.Minute)
	insertKey(t, db, "old-locked", time.Hour)
	insertKey(t, db, "young", -time.Minute)
	if _, err := db.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key LIKE 'old%'`); err != nil {
		t.Fatal(err)
	}
	n, err := idempotency.DeleteExpired(ctx, db, 24*time.Hour, 100)
	if err != nil || n != 1 {
		t.Fatalf("DeleteExpired = %d, %v; want 1 (old)", n, err)
	}
	rows, _ := db.Query(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(left, ",") != "old-locked,young" {
		t.Errorf("keys left = %q (%v), want old-locked (still locked) and young", left, err)
	}
}
