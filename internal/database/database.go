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
// holding API workers: DESIGN.md asks for a 503 within 2 s when Postgres is
// down, so neither connecting nor a statement may take longer than that.
type Config struct {
	URL              string
	MaxConns         int32
	ConnectTimeout   time.Duration // per connection attempt (TCP + startup)
	StatementTimeout time.Duration // server-side statement_timeout for every session
	// Tracer, if set, traces every query (telemetry.PgxTracer).
	Tracer pgx.QueryTracer
}

// Open builds a pool without connecting: pgxpool connects lazily, so a
// process starts even while Postgres is unreachable, reports not-ready, and
// recovers by itself once the database comes back.
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
