package database

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/resilientcheckout/checkout/migrations"
)

// migrateLockID is the key of the session advisory lock that serialises
// concurrent `checkout migrate` runs (two replicas starting at once). goose
// takes its own lock too; this one also covers River's migrations, which
// would otherwise race each other.
const migrateLockID = 0x636b6f7574 // "ckout"

// Migrate applies the application schema (goose, from migrations/*.sql) and
// River's schema (rivermigrate), both idempotently. Running it again, or from
// several processes at once, is safe.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if err := lockForMigration(ctx, conn); err != nil {
		return err
	}
	defer func() {
		// Unlock on a fresh context: ctx may be done, and a session lock left
		// behind would block every later migration on this connection.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrateLockID)
	}()

	if err := migrateApp(ctx, pool, logger); err != nil {
		return err
	}
	return migrateRiver(ctx, pool, logger)
}

// lockForMigration takes the migration lock on conn, waiting as long as ctx
// allows while another process migrates. It asks with pg_try_advisory_lock
// rather than waiting inside pg_advisory_lock: a wait inside a statement is
// cancelled by the server's statement_timeout (DB_STATEMENT_TIMEOUT), so
// replicas starting together — a Deployment's pods, each migrating in an
// init container — would fail while the first one migrates, and restart.
func lockForMigration(ctx context.Context, conn *pgxpool.Conn) error {
	backoff := 50 * time.Millisecond
	for {
		var locked bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", migrateLockID).Scan(&locked); err != nil {
			return fmt.Errorf("migrate: take advisory lock: %w", err)
		}
		if locked {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migrate: wait for another migration: %w", ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Backoff between connection attempts of AwaitConnection: doubling from
// the first to the last, so a database that takes a second to start is
// found within a few hundred milliseconds and one that takes a minute is
// not asked more than every two seconds.
const (
	awaitFirstBackoff = 250 * time.Millisecond
	awaitMaxBackoff   = 2 * time.Second
)

// AwaitConnection waits until pool reaches the database, retrying for up to
// within while the database is unreachable or still starting (a refused
// connection, "the database system is starting up"), with backoff between
// attempts. It is for one-shot commands such as `checkout migrate`, which
// have nothing to do until the database answers and would otherwise exit
// at the first refused connection: compose or Kubernetes may start them
// while a fresh Postgres still initialises. Long-running processes do not
// need it: their pools connect lazily and report /ready 503 meanwhile.
//
// Errors that waiting cannot fix — a wrong password, a database that does
// not exist — are returned at once. A within of 0 makes one attempt.
func AwaitConnection(ctx context.Context, pool *pgxpool.Pool, within time.Duration, logger *slog.Logger) error {
	deadline := time.Now().Add(within)
	backoff := awaitFirstBackoff
	var lastErr error
	for attempt := 1; ; attempt++ {
		attemptCtx, cancel := ctx, context.CancelFunc(func() {})
		if within > 0 {
			attemptCtx, cancel = context.WithDeadline(ctx, deadline)
		}
		err := pool.Ping(attemptCtx)
		cancel()
		if err == nil {
			if attempt > 1 {
				logger.InfoContext(ctx, "database reachable", "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("connect to database: %w", ctx.Err())
		}
		if !IsUnavailable(err) {
			return fmt.Errorf("connect to database: %w", err)
		}
		// An attempt cut short by the deadline says less than the one
		// before it (connection refused, say): report that one.
		if lastErr == nil || !errors.Is(err, context.DeadlineExceeded) {
			lastErr = err
		}
		wait := min(backoff, time.Until(deadline))
		if wait <= 0 {
			return fmt.Errorf("database not reachable within %s (%d attempts): %w", within, attempt, lastErr)
		}
		logger.WarnContext(ctx, "database not reachable yet, retrying",
			"attempt", attempt, "retry_in", wait, "gives_up_in", time.Until(deadline).Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect to database: %w", ctx.Err())
		case <-time.After(wait):
		}
		backoff = min(2*backoff, awaitMaxBackoff)
	}
}

func migrateApp(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migrate: goose locker: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("migrate: goose provider: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: apply application schema: %w", err)
	}
	for _, r := range results {
		logger.InfoContext(ctx, "applied migration", "source", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

func migrateRiver(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate: river migrator: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrate: apply river schema: %w", err)
	}
	for _, v := range res.Versions {
		logger.InfoContext(ctx, "applied river migration", "version", v.Version, "duration", v.Duration)
	}
	return nil
}
