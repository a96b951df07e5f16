package idempotency_test

import (
	"bytes"
	"context"
	"errors"
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
func claim(t *testing.T, db *pgxpool.Pool, key string, fp []byte, lockFor time.Duration) idempotency.Claim {
	t.Helper()
	ctx := context.Background()
	orderID := uuid.New()
	// ClaimSQL as the flow uses it: the order is inserted only if the key
	// was new; no row back means the key was taken.
	err := db.QueryRow(ctx, `
		WITH claimed AS (`+idempotency.ClaimSQL+`)
		INSERT INTO orders (id, status, customer_id, currency, payment_method, items, total)
		SELECT order_id, 'pending', 'c', 'USD', 'pm', '[{}]', 1 FROM claimed
		RETURNING id`, idempotency.ClaimArgs(key, fp, orderID, lockFor)).Scan(&orderID)
	if err == nil {
		return idempotency.Claim{State: idempotency.Claimed, OrderID: orderID}
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("claim %s: %v", key, err)
	}
	var c idempotency.Claim
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		c, err = idempotency.Lookup(ctx, tx, key, fp, lockFor)
		return err
	})
	if err != nil {
		t.Fatalf("Lookup(%s): %v", key, err)
	}
	return c
}

func TestClaimLifecycle(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	fp, other := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)

	steps := []struct {
		name    string
		before  func(t *testing.T)
		fp      []byte
		want    idempotency.State
		lockFor time.Duration
	}{
		{name: "new key", fp: fp, want: idempotency.Claimed, lockFor: time.Minute},
		{name: "held by the first request", fp: fp, want: idempotency.InProgress, lockFor: time.Minute},
		{name: "other body while held", fp: other, want: idempotency.Mismatch, lockFor: time.Minute},
		{name: "after Release", fp: fp, want: idempotency.Resumed, lockFor: time.Minute, before: func(t *testing.T) {
			if err := idempotency.Release(ctx, db, "k"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "after Finish", fp: fp, want: idempotency.Finished, before: func(t *testing.T) {
			b := &pgx.Batch{}
			idempotency.QueueFinish(b, "k", idempotency.Response{Status: 201, ContentType: "application/json", Location: "/x", Body: []byte(`{}`)})
			if err := db.SendBatch(ctx, b).Close(); err != nil {
				t.Fatal(err)
			}
			// Release never unlocks a finished request into a resumable one.
			if err := idempotency.Release(ctx, db, "k"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "other body after Finish", fp: other, want: idempotency.Mismatch},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before(t)
		}
		if got := claim(t, db, "k", s.fp, s.lockFor); got.State != s.want {
			t.Fatalf("%s: state %v, want %v", s.name, got.State, s.want)
		}
	}
	c := claim(t, db, "k", fp, 0)
	want := idempotency.Response{Status: 201, ContentType: "application/json", Location: "/x", Body: []byte(`{}`)}
	if c.Response.Status != want.Status || c.Response.ContentType != want.ContentType ||
		c.Response.Location != want.Location || !bytes.Equal(c.Response.Body, want.Body) {
		t.Errorf("replayed response = %+v, want %+v", c.Response, want)
	}
}

func TestDeleteExpired(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	fp := bytes.Repeat([]byte{1}, 32)
	claim(t, db, "old", fp, -time.Minute)
	claim(t, db, "old-locked", fp, time.Hour)
	claim(t, db, "young", fp, -time.Minute)
	if _, err := db.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key LIKE 'old%'`); err != nil {
		t.Fatal(err)
	}
	n, err := idempotency.DeleteExpired(ctx, db, time.Now().Add(-24*time.Hour), 100)
	if err != nil || n != 1 {
		t.Fatalf("DeleteExpired = %d, %v; want 1 (old)", n, err)
	}
	rows, _ := db.Query(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(left, ",") != "old-locked,young" {
		t.Errorf("keys left = %q (%v), want old-locked (still locked) and young", left, err)
	}
}
