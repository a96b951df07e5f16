package database

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means the database could not be reached
// or could not serve the statement in time — worth a 503 and a retry — as
// opposed to a statement the database understood and rejected, which is a
// bug. An error that did not come from the server (refused or reset
// connection, timeout, "conn closed", cancelled context) is unavailability:
// that is how a database outage shows up, in many shapes.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true
	}
	switch pgErr.Code {
	case "40001", "40P01": // serialization failure, deadlock detected: retryable
		return true
	}
	switch pgErr.Code[:2] {
	case "08", // connection exception
		"53", // insufficient resources (too many connections, disk full)
		"57", // operator intervention: shutdown, statement_timeout (57014)
		"58": // system error (I/O)
		return true
	}
	return false
}
