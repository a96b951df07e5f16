// Package idempotency holds what is generic in the server side of the IETF
// Idempotency-Key draft: the header and its key format, the states a claim
// of a key can find, and the retention of keys (the prune job).
//
// Claiming a key is part of the statement that creates the request's
// effects, so that SQL lives with those effects (internal/order/store.go):
// (scope, key) is unique in idempotency_keys, so the database, not an
// in-process map, arbitrates concurrent requests, across replicas too. The
// scope is the authenticated customer, or the empty string without
// authentication. The key alone is unique too for now, which the previous
// release's statements need (migrations/00007_idempotency_key_scope.sql).
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Header is the request header carrying the key.
const Header = "Idempotency-Key"

// ErrInvalidKey: the header is missing or not 1–255 visible ASCII characters.
var ErrInvalidKey = errors.New("Idempotency-Key must be 1 to 255 visible ASCII characters")

// ParseKey validates a header value. The draft sends the key as a
// structured-field string ("abc"); the quotes are not part of the key.
func ParseKey(header string) (string, error) {
	key := header
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	if len(key) < 1 || len(key) > 255 {
		return "", ErrInvalidKey
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", ErrInvalidKey
		}
	}
	return key, nil
}

// State says what a claim found.
type State int

const (
	// Claimed: the key is new; the caller owns it and creates the effects.
	Claimed State = iota
	// Resumed: an earlier request with this key stopped without an answer
	// (its process died, or it released the key after a non-final outcome)
	// and its lock has expired; the caller owns the key again and continues
	// from the effects the earlier request created.
	Resumed
	// Finished: the answer is stored; replay it.
	Finished
	// InProgress: another request holds the key right now (409).
	InProgress
	// Mismatch: the key was used with a different request body (422).
	Mismatch
)

// Execer is what the functions below run SQL on: a *pgxpool.Pool or a pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DeleteExpired deletes keys created more than retention ago, at most limit
// of them per call so a large backlog is removed in short transactions.
// Keys still locked by a request in flight are kept. Age is measured on the
// database's clock, the clock that wrote created_at.
func DeleteExpired(ctx context.Context, db Execer, retention time.Duration, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM idempotency_keys
		WHERE (scope, key) IN (
			SELECT scope, key FROM idempotency_keys
			WHERE created_at < now() - make_interval(secs => $1)
			  AND (locked_until IS NULL OR locked_until < now())
			ORDER BY created_at
			LIMIT $2)`, retention.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}
