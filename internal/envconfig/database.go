package envconfig

import (
	"time"

	"github.com/resilientcheckout/checkout/internal/database"
)

// DefaultDatabaseURL is the demo's database (docker compose publishes it on
// localhost).
const DefaultDatabaseURL = "postgres://checkout:checkout@localhost:5432/checkout?sslmode=disable"

// Database reads the connection settings over the defaults d; a zero d.URL
// means DefaultDatabaseURL.
func (r *Reader) Database(d database.Config) database.Config {
	if d.URL == "" {
		d.URL = DefaultDatabaseURL
	}
	cfg := database.Config{
		URL:              r.URL("DATABASE_URL", d.URL, "postgres", "postgresql"),
		MaxConns:         int32(r.Int("DB_MAX_CONNS", int(d.MaxConns), 1, 1000)),
		ConnectTimeout:   r.Duration("DB_CONNECT_TIMEOUT", d.ConnectTimeout, 100*time.Millisecond, time.Minute),
		StatementTimeout: r.Duration("DB_STATEMENT_TIMEOUT", d.StatementTimeout, 0, time.Minute),
	}
	// 0 sends no statement_timeout (the role's setting applies: behind
	// PgBouncer); anything else under 100ms is a typo.
	if st := cfg.StatementTimeout; st > 0 && st < 100*time.Millisecond {
		r.fail("DB_STATEMENT_TIMEOUT", r.lookup("DB_STATEMENT_TIMEOUT"), "want 0 (the role's setting applies) or a duration from 100ms to 1m0s")
		cfg.StatementTimeout = d.StatementTimeout
	}
	return cfg
}
