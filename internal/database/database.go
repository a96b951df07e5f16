// Package database opens the PostgreSQL connection pool every binary shares
// and applies the schema. It knows nothing about orders: it only makes sure
// that a dead or slow database turns into a prompt error instead of a hung
// request, and that the schema (the application's and River's) is in place.
package database

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config tunes the pool. The timeouts are what keeps a database outage from
// holding API workers: a dead database answers 503 within 2 s
// (docs/design.md, "Defaults"), so neither connecting nor a statement may
// take longer than that.
type Config struct {
	URL            string
	MaxConns       int32
	ConnectTimeout time.Duration // per connection attempt (TCP + startup)
	// StatementTimeout is the server-side statement_timeout of every
	// session, sent as a startup parameter, so it costs no round trip and
	// covers River's statements as well as ours. Zero sends none: the
	// server's setting for the role or database applies.
	//
	// Zero is the setting behind a pooler in transaction mode. PgBouncer
	// refuses a connection that sends statement_timeout ("unsupported
	// startup parameter"), and listing it in ignore_startup_parameters
	// drops it silently. A SET after connecting would not help either: it
	// would land on whichever server session the pooler lent us for that
	// one statement and stay there for the next client. The role's own
	// setting (ALTER ROLE … SET statement_timeout, docs/operations.md, "PgBouncer")
	// is the one every server session the pooler opens for it starts with.
	StatementTimeout time.Duration
	// Tracer, if set, traces every query (telemetry.PgxTracer).
	Tracer pgx.QueryTracer
}

// Open builds a pool without connecting: pgxpool connects lazily, so a
// process starts even while Postgres is unreachable, reports not-ready, and
// recovers by itself once the database comes back.
//
// The URL's own parameters pass through to pgx. Behind PgBouncer in
// transaction mode (1.18, Debian 12's) that is where
// default_query_exec_mode=exec belongs: pgx's default caches named
// prepared statements per connection, and such a pooler hands the next
// statement to a server session that never prepared it.
func Open(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx's message may quote the URL, password included.
		return nil, fmt.Errorf("parse database URL: invalid connection string")
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	if cfg.ConnectTimeout > 0 {
		pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	if cfg.StatementTimeout > 0 {
		pc.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	}
	if cfg.Tracer != nil {
		pc.ConnConfig.Tracer = cfg.Tracer
	}
	// Connections that sat idle across a database restart are dead. pgxpool
	// pings a connection idle for over a second before handing it out; this
	// background sweep also replaces dead idle connections between requests,
	// so the first requests after a restart find live ones.
	pc.HealthCheckPeriod = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("create database pool: %w", err)
	}
	return pool, nil
}
