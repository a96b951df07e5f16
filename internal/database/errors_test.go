package database_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/resilientcheckout/checkout/internal/database"
)

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), true},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{"reset mid-statement", fmt.Errorf("query: %w", io.ErrUnexpectedEOF), true},
		{"conn closed", fmt.Errorf("exec: %w", pgconn.ErrConnClosed), true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"statement timeout", &pgconn.PgError{Code: "57014"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, true},
		{"idle in transaction timeout", &pgconn.PgError{Code: "25P03", Severity: "FATAL"}, true},
		{"check violation: a bug", &pgconn.PgError{Code: "23514"}, false},
		{"syntax error: a bug", &pgconn.PgError{Code: "42601"}, false},
		{"scan error: a bug", errors.New("can't scan into dest[0]"), false},
	}
	for _, tt := range tests {
		if got := database.IsUnavailable(tt.err); got != tt.want {
			t.Errorf("%s: IsUnavailable(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
