package database

import (
	"context"
	"fmt"
	"log/slog"

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
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockID); err != nil {
		return fmt.Errorf("migrate: take advisory lock: %w", err)
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
