package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Channel is the NOTIFY channel every write to breaker_states notifies,
// with the dependency as payload.
const Channel = "breaker_states"

// States of a breaker_states row.
const (
	stateClosed     = "closed"
	stateOpen       = "open"
	stateForcedOpen = "forced_open"
)

// db is what the store needs: a pool or a connection.
type db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// row is a dependency's shared state with its deadlines turned into time
// left on the database's clock (negative once passed; nil when absent).
type row struct {
	State        string
	Left         *time.Duration // until - now()
	FailedProbes int
	Holder       *string
	LeaseLeft    *time.Duration // probe_until - now()
	Source       string
	Generation   int64
	UpdatedAt    time.Time
}

const rowColumns = `
       state,
       extract(epoch FROM until - now())::float8,
       failed_probes,
       probe_holder,
       extract(epoch FROM probe_until - now())::float8,
       source, generation, updated_at
FROM breaker_states`

const selectRow = `SELECT` + rowColumns

func scanRow(s pgx.Row, dependency *string) (row, error) {
	var r row
	var left, lease *float64
	dest := []any{&r.State, &left, &r.FailedProbes, &r.Holder, &lease, &r.Source, &r.Generation, &r.UpdatedAt}
	if dependency != nil {
		dest = append([]any{dependency}, dest...)
	}
	if err := s.Scan(dest...); err != nil {
		return row{}, err
	}
	r.Left, r.LeaseLeft = seconds(left), seconds(lease)
	return r, nil
}

func seconds(s *float64) *time.Duration {
	if s == nil {
		return nil
	}
	d := time.Duration(*s * float64(time.Second))
	return &d
}

// read returns the dependency's row; a dependency without one is closed.
func read(ctx context.Context, q db, dependency string) (row, error) {
	r, err := scanRow(q.QueryRow(ctx, selectRow+` WHERE dependency = $1`, dependency), nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return row{State: stateClosed}, nil
	}
	if err != nil {
		return row{}, fmt.Errorf("read breaker state of %s: %w", dependency, err)
	}
	return r, nil
}

// The writes. Each notifies Channel in the same statement, so the
// notification goes out exactly when, and only if, the write commits.
const (
	// A process's own breaker opened for $3 seconds. It opens the fleet's
	// breaker unless that is already open until later, forced open, or
	// half-open with a probe out (whose verdict decides).
	opened = `
WITH w AS (
    INSERT INTO breaker_states AS b (dependency, state, until, source)
    VALUES ($1, 'open', now() + make_interval(secs => $3), $2)
    ON CONFLICT (dependency) DO UPDATE
    SET state = 'open', until = EXCLUDED.until, source = EXCLUDED.source,
        failed_probes = CASE WHEN b.state = 'open' THEN b.failed_probes ELSE 0 END,
        probe_holder = NULL, probe_until = NULL,
        generation = b.generation + 1, updated_at = now()
    WHERE b.state = 'closed'
       OR (b.state = 'forced_open' AND b.until <= now())
       OR (b.state = 'open' AND b.until < EXCLUDED.until AND b.probe_holder IS NULL)
    RETURNING dependency)
SELECT count(pg_notify('` + Channel + `', dependency)) FROM w`

	// The open state has passed: $2 takes the probe lease for $3 seconds,
	// if no one holds it.
	takeLease = `
WITH w AS (
    UPDATE breaker_states
    SET probe_holder = $2, probe_until = now() + make_interval(secs => $3),
        generation = generation + 1, updated_at = now()
    WHERE dependency = $1 AND state = 'open' AND until <= now()
      AND (probe_holder IS NULL OR probe_until <= now())
    RETURNING dependency)
SELECT count(pg_notify('` + Channel + `', dependency)) FROM w`

	// The lease holder $2 has no call to probe with: it gives the lease back.
	dropLease = `
WITH w AS (
    UPDATE breaker_states
    SET probe_holder = NULL, probe_until = NULL,
        generation = generation + 1, updated_at = now()
    WHERE dependency = $1 AND state = 'open' AND probe_holder = $2
    RETURNING dependency)
SELECT count(pg_notify('` + Channel + `', dependency)) FROM w`

	// The lease holder's probes all succeeded.
	probeSucceeded = `
WITH w AS (
    UPDATE breaker_states
    SET state = 'closed', until = NULL, failed_probes = 0,
        probe_holder = NULL, probe_until = NULL, source = $2,
        generation = generation + 1, updated_at = now()
    WHERE dependency = $1 AND state = 'open' AND probe_holder = $2
    RETURNING dependency)
SELECT count(pg_notify('` + Channel + `', dependency)) FROM w`

	// A probe of the lease holder failed: open again for $3 seconds.
	probeFailed = `
WITH w AS (
    UPDATE breaker_states
    SET until = now() + make_interval(secs => $3), failed_probes = failed_probes + 1,
        probe_holder = NULL, probe_until = NULL, source = $2,
        generation = generation + 1, updated_at = now()
    WHERE dependency = $1 AND state = 'open' AND probe_holder = $2
    RETURNING dependency)
SELECT count(pg_notify('` + Channel + `', dependency)) FROM w`

	// An operator forces the dependency open, for $3 seconds or (NULL)
	// until cleared.
	forceOpen = `
WITH w AS (
    INSERT INTO breaker_states AS b (dependency, state, until, source)
    VALUES ($1, 'forced_open', now() + make_interval(secs => $3), $2)
    ON CONFLICT (dependency) DO UPDATE
    SET state = 'forced_open', until = EXCLUDED.until, source = EXCLUDED.source,
        failed_probes = 0, probe_holder = NULL, probe_until = NULL,
        generation = b.generation + 1, updated_at = now()
    RETURNING dependency)
SELECT count(pg_notify('` + Channel + `', dependency)) FROM w`

	// An operator gives the decision back to each process's breaker.
	clearState = `
WITH w AS (
    UPDATE breaker_states
    SET state = 'closed', until = NULL, failed_probes = 0,
        probe_holder = NULL, probe_until = NULL, source = $2,
        generation = generation + 1, updated_at = now()
    WHERE dependency = $1
    RETURNING dependency)
SELECT count(pg_notify('` + Channel + `', dependency)) FROM w`
)

// write runs one of the writes above and reports whether it changed the row.
func write(ctx context.Context, q db, sql string, args ...any) (bool, error) {
	var n int
	if err := q.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

func secs(d time.Duration) float64 { return d.Seconds() }
