// Package idempotency implements the server side of the IETF
// Idempotency-Key draft on PostgreSQL: a request's key is claimed in the same
// transaction that creates its effects, its response is stored in the same
// transaction that settles them, and a repeat gets that response back.
//
// One key can never produce two orders because the key is the table's
// primary key: the database, not an in-process map, arbitrates concurrent
// requests, so it holds across replicas too.
package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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

// Response is what a repeat of a finished request gets back byte for byte.
type Response struct {
	Status      int
	ContentType string
	Location    string // empty when the response had none
	Body        []byte
}

// State says what a claim found.
type State int

const (
	// Claimed: the key is new; the caller owns it and must create the effects.
	Claimed State = iota
	// Resumed: an earlier request with this key stopped without a response
	// (its process died, or it released the key after a non-final outcome)
	// and its lock has expired; the caller owns the key again and continues
	// from Claim.OrderID.
	Resumed
	// Finished: the response is stored; replay Claim.Response.
	Finished
	// InProgress: another request holds the key right now (409).
	InProgress
	// Mismatch: the key was used with a different request body (422).
	Mismatch
)

// Claim is the outcome of claiming a key.
type Claim struct {
	State    State
	OrderID  uuid.UUID // set for Resumed (and Finished) when the order exists
	Response Response  // set for Finished
}

// ClaimSQL claims a new key for one request: it stores the request's
// fingerprint and the id of the order the request creates, locks the key, and
// returns order_id only when the key was new. Its arguments are named
// (pgx.NamedArgs) and come from ClaimArgs, so the statement that embeds it
// numbers nothing around it.
//
// It is the first CTE of the statement that creates the request's effects
// (order.insertOrderWithKeyAndJob): they are inserted from its result, so a
// key seen before inserts nothing — no error, nothing to roll back — and the
// caller goes on with Lookup. Lock expiry is computed and compared on the
// database's clock alone, so clock skew between replicas cannot shorten or
// stretch a lock.
//
// A concurrent claim of the same key waits on the primary key until the
// first transaction ends, then finds the key taken: that wait is what makes
// concurrent identical requests produce one order.
const ClaimSQL = `INSERT INTO idempotency_keys (key, request_fingerprint, order_id, locked_until)
	VALUES (@claim_key, @claim_fingerprint, @claim_order_id, now() + make_interval(secs => @claim_lock_seconds))
	ON CONFLICT (key) DO NOTHING
	RETURNING order_id`

// ClaimArgs are ClaimSQL's arguments: key for a request with this fingerprint
// that creates orderID, locked for lockFor. Add the embedding statement's own
// named arguments to the map.
func ClaimArgs(key string, fingerprint []byte, orderID uuid.UUID, lockFor time.Duration) pgx.NamedArgs {
	return pgx.NamedArgs{
		"claim_key":          key,
		"claim_fingerprint":  fingerprint,
		"claim_order_id":     orderID,
		"claim_lock_seconds": lockFor.Seconds(),
	}
}

// Lookup reads an existing key inside tx and says what this request may do
// with it. If the key's lock has expired without a response, the request
// takes it over (State Resumed), locking it again for lockFor.
func Lookup(ctx context.Context, tx pgx.Tx, key string, fingerprint []byte, lockFor time.Duration) (Claim, error) {
	var (
		storedFingerprint []byte
		orderID           *uuid.UUID
		locked            bool
		status            *int
		contentType       *string
		location          *string
		body              []byte
	)
	err := tx.QueryRow(ctx, `
		SELECT request_fingerprint, order_id, coalesce(locked_until > now(), false),
		       response_status, response_content_type, response_location, response_body
		FROM idempotency_keys WHERE key = $1 FOR UPDATE`, key).
		Scan(&storedFingerprint, &orderID, &locked, &status, &contentType, &location, &body)
	if err != nil {
		return Claim{}, fmt.Errorf("read idempotency key: %w", err)
	}
	claim := Claim{}
	if orderID != nil {
		claim.OrderID = *orderID
	}
	switch {
	case !bytes.Equal(storedFingerprint, fingerprint):
		claim.State = Mismatch
	case status != nil:
		claim.State = Finished
		claim.Response = Response{Status: *status, ContentType: *contentType, Body: body}
		if location != nil {
			claim.Response.Location = *location
		}
	case locked:
		claim.State = InProgress
	default:
		if _, err := tx.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() + make_interval(secs => $2) WHERE key = $1`,
			key, lockFor.Seconds()); err != nil {
			return Claim{}, fmt.Errorf("relock idempotency key: %w", err)
		}
		claim.State = Resumed
	}
	return claim, nil
}

// QueueFinish queues, on the batch that settles the request's effects, the
// storing of its final response and the release of its lock. The first
// response stored wins: a request that outlived its lock cannot overwrite
// what a resumed request already answered.
func QueueFinish(b *pgx.Batch, key string, r Response) {
	var location *string
	if r.Location != "" {
		location = &r.Location
	}
	b.Queue(`
		UPDATE idempotency_keys
		SET response_status = $2, response_content_type = $3, response_location = $4,
		    response_body = $5, locked_until = NULL
		WHERE key = $1 AND response_status IS NULL`, key, r.Status, r.ContentType, location, r.Body)
}

// Execer is what the functions below run SQL on: a *pgxpool.Pool or a pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Release drops the lock without storing a response, so the client's retry
// with the same key resumes at once instead of waiting for the lock to
// expire. Used when the outcome is not final (a 502/504 without fallback).
func Release(ctx context.Context, db Execer, key string) error {
	if _, err := db.Exec(ctx, `UPDATE idempotency_keys SET locked_until = NULL WHERE key = $1 AND response_status IS NULL`, key); err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return nil
}

// DeleteExpired deletes keys created before cutoff, at most limit of them
// per call so a large backlog is removed in short transactions. Keys still
// locked by a request in flight are kept.
func DeleteExpired(ctx context.Context, db Execer, cutoff time.Time, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM idempotency_keys
		WHERE key IN (
			SELECT key FROM idempotency_keys
			WHERE created_at < $1 AND (locked_until IS NULL OR locked_until < now())
			ORDER BY created_at
			LIMIT $2)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}
