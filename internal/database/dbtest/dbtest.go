// Package dbtest gives every test a fresh, fully migrated PostgreSQL database
// of its own, so test packages run in parallel (and with -race) without
// seeing each other's rows.
//
// The server comes from TEST_DATABASE_URL when it is set (that is how CI and
// `make test` run: .ci/run starts a throwaway PostgreSQL 15). Otherwise
// testcontainers-go starts postgres:17-alpine. With neither, tests fail with a
// message saying how to provide one — they never skip silently.
//
// Migrations run once per server into a template database; each test then
// gets `CREATE DATABASE … TEMPLATE`, a file copy that takes milliseconds.
//
// StartPgBouncer puts a PgBouncer of the test's own in front of that server
// the same way: a local pgbouncer binary when there is one (PGBOUNCER, PATH,
// /usr/sbin/pgbouncer; .ci/run sets PGBOUNCER), else a container built from
// deploy/pgbouncer/Dockerfile by testcontainers-go; with neither, the test
// fails saying how to get one.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/migrations"
)

// EnvURL names the variable that points the tests at an existing server. The
// role must be allowed to create databases.
const EnvURL = "TEST_DATABASE_URL"

// server is shared by all tests of one test binary.
var server struct {
	once     sync.Once
	url      *url.URL // the server's admin database
	template string   // migrated template database name
	err      error
}

// URL returns the connection string of a new migrated database that is
// dropped when the test ends. Use it to start processes (checkout, worker)
// against the database; use Pool for direct access.
func URL(t testing.TB) string {
	t.Helper()
	server.once.Do(func() { server.err = prepareServer() })
	if server.err != nil {
		t.Fatalf("dbtest: %v", server.err)
	}

	name := "checkout_test_" + randomHex(8)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, server.url.String())
	if err != nil {
		t.Fatalf("dbtest: connect to %s: %v", redact(server.url), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{server.template}.Sanitize()); err != nil {
		t.Fatalf("dbtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(t, name) })
	return withDatabase(server.url, name)
}

// Pool returns a pool on a new migrated database; both are closed and
// dropped when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dbURL := URL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("dbtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the drop: cleanups are LIFO
	return pool
}

func dropDatabase(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, server.url.String())
	if err != nil {
		t.Errorf("dbtest: drop %s: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	// FORCE: a process under test may still hold connections at cleanup.
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("dbtest: drop %s: %v", name, err)
	}
}

func prepareServer() error {
	raw := os.Getenv(EnvURL)
	if raw == "" {
		var err error
		if raw, err = startContainer(); err != nil {
			return fmt.Errorf("no PostgreSQL for tests: set %s to a server whose role may create databases "+
				"(e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable; `bash .ci/run` starts one), "+
				"or run a Docker engine for testcontainers: %w", EnvURL, err)
		}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return fmt.Errorf("%s must be a postgres:// URL", EnvURL)
	}
	server.url = u
	server.template, err = ensureTemplate(u)
	return err
}

func startContainer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The container outlives this function on purpose: testcontainers' reaper
	// removes it when the test binary exits.
	c, err := postgres.Run(ctx, "postgres:17-alpine",
		postgres.WithDatabase("postgres"),
		postgres.WithUsername("postgres"),
		postgres.WithPassword("postgres"),
		postgres.BasicWaitStrategies(),
	)
	if err != nil {
		return "", err
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

// ensureTemplate creates the migrated template database unless a previous
// test binary already did. Its name carries a hash of every migration, so a
// changed schema gets a new template instead of a stale one. Test binaries of
// different packages start concurrently, hence the advisory lock.
func ensureTemplate(server *url.URL) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name, err := templateName()
	if err != nil {
		return "", err
	}
	admin, err := pgx.Connect(ctx, server.String())
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redact(server), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(hashtext('dbtest template'))"); err != nil {
		return "", fmt.Errorf("lock template: %w", err)
	}
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}

	// Build under a scratch name and rename when complete, so a test binary
	// killed halfway never leaves a half-migrated template behind.
	building := name + "_building"
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop stale template: %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	if err := migrate(ctx, withDatabase(server, building)); err != nil {
		return "", err
	}
	// No connections allowed: CREATE DATABASE … TEMPLATE fails while anyone
	// is connected to the template.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("rename template: %w", err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return "", fmt.Errorf("seal template: %w", err)
	}
	return name, nil
}

func migrate(ctx context.Context, dbURL string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open template: %w", err)
	}
	defer pool.Close()
	logger := slog.New(slog.DiscardHandler)
	if err := database.Migrate(ctx, pool, logger); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return nil
}

// templateName hashes the application migrations and River's migration list.
func templateName() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := migrations.FS.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, _ = io.WriteString(h, path)
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		return "", fmt.Errorf("list river migrations: %w", err)
	}
	for _, m := range migrator.AllVersions() {
		_, _ = fmt.Fprintf(h, "river:%d:%s:%s", m.Version, m.SQLUp, m.SQLDown)
	}
	return "checkout_template_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

func withDatabase(server *url.URL, name string) string {
	u := *server
	u.Path = "/" + name
	return u.String()
}

func redact(u *url.URL) string { return u.Redacted() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
