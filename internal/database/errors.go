package database

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means the database could not be reached
// or could not serve the statement in time — worth a 503 and a retry — as
// opposed to a statement the database understood and rejected, or a bug in
// our code (a failed scan), which deserve a 500 and an error log.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected: // retryable
			return true
		case pgerrcode.IdleInTransactionSessionTimeout:
			// FATAL: the server ended a session that idled in its
			// transaction past idle_in_transaction_session_timeout — our
			// process stalled (CPU starvation, GC) between two statements.
			// The transaction was rolled back with the session, uncommitted.
			return true
		}
		return pgerrcode.IsConnectionException(pgErr.Code) ||
			pgerrcode.IsInsufficientResources(pgErr.Code) || // too many connections, disk full
			pgerrcode.IsOperatorIntervention(pgErr.Code) || // shutdown, statement_timeout (57014)
			pgerrcode.IsSystemError(pgErr.Code) // I/O
	}
	// An outage shows up in many shapes on the client side: refused or reset
	// connections, timeouts, a connection closed mid-statement, a pool that
	// could not connect before the deadline.
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) ||
		errors.Is(err, pgconn.ErrConnClosed) ||
		errors.As(err, &netErr) ||
		errors.As(err, &connectErr) ||
		pgconn.Timeout(err) ||
		pgconn.SafeToRetry(err)
}
