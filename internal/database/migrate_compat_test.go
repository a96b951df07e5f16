package database_test

// A rolling update runs the previous release's pods on the new schema: the
// new pods' migrate init container applies a migration while the old pods
// still take orders (docs/operations.md, "Writing a migration: expand, then
// contract"). So every migration from 00007 on comes with the statements of
// the release before it, in migrations/compat/<version>.sql, and the tests
// here run them on a database migrated up to the one before, then again
// after it: a statement that fails after the migration would fail every
// request of an old pod until the rollout ends.
//
// Writing migrations/compat/<version>.sql for a new migration:
//
//  1. The previous release is the tree just before the migration is
//     added: HEAD while you write it, or, for a migration added in commit
//     C, the tree at C^ (`git show C^:internal/order/store.go`). List its
//     statements with
//     git grep -nE 'Exec|Query|QueryRow|Queue' C^ -- internal cmd ':!*_test.go'
//     and keep every one that checkout or the worker sends to an application
//     table (internal/order/store.go, internal/idempotency,
//     internal/fleet/store.go and operator.go, internal/ledger/ledger.go, …).
//     River's own statements are River's to keep compatible; the lab tools
//     and simulators are not deployed beside the service.
//  2. Start from the newest file in migrations/compat, which holds the
//     release before the previous migration, and carry over what changed
//     since (git diff of those files between the two trees).
//  3. Replace each $n with a literal sample value. Put each statement under
//     a "-- case: <what calls it>" line; statements that belong together (a
//     read, then the update it leads to) share a case. "-- seed:" blocks
//     write the rows the cases need, with the release's own writes.
//
// Seeds are committed before the migration runs, so it meets rows as a live
// database has them. Each case runs in a transaction of its own that is
// rolled back, so cases do not depend on each other's writes. A statement
// ends at a line ending in ";".

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/migrations"
)

// firstCheckedMigration is the first migration that must come with the
// statements of the release before it. The ones before were written before
// the check (00004 says to replace replicas rather than mix releases).
const firstCheckedMigration = 7

// compatDir holds the releases' statements, one file per migration.
const compatDir = "../../migrations/compat"

// TestMigrationsKeepThePreviousReleaseWorking runs, for each migration from
// 00007 on, the release before it on the schema before and after it. A
// migration without its release's statements fails the test; so does a
// file of statements for a migration past the next one.
func TestMigrationsKeepThePreviousReleaseWorking(t *testing.T) {
	t.Parallel()
	versions := migrationVersions(t, migrations.FS)
	newest := versions[len(versions)-1]
	releases := compatReleases(t)
	for _, v := range versions {
		if v < firstCheckedMigration {
			continue
		}
		rel, ok := releases[v]
		if !ok {
			t.Errorf("migration %05d has no statements of the release before it: write migrations/compat/%05d.sql "+
				"(the header of migrate_compat_test.go says how)", v, v)
			continue
		}
		t.Run(fmt.Sprintf("%05d", v), func(t *testing.T) {
			t.Parallel()
			for _, problem := range checkMigration(t, migrations.FS, v, rel) {
				t.Error(problem)
			}
		})
	}
	for _, v := range slices.Sorted(maps.Keys(releases)) {
		rel := releases[v]
		switch {
		case v <= newest:
		case v == newest+1:
			// The release now in the tree, waiting for the next
			// migration: its statements must run on today's schema.
			t.Run(fmt.Sprintf("%05d not written yet", v), func(t *testing.T) {
				t.Parallel()
				pool := emptyDatabase(t)
				migrateTo(t, pool, migrations.FS, newest)
				for _, problem := range rel.check(t, pool) {
					t.Errorf("on the newest schema (%05d): %s", newest, problem)
				}
			})
		default:
			t.Errorf("%s is for migration %05d, but the newest is %05d: only the next migration's release may wait for it", rel.file, v, newest)
		}
	}
}

// TestCompatCheckFindsAMigrationThatBreaksThePreviousRelease runs the check
// on 00007 as it was first released: it swapped the primary key to
// (scope, key), and the previous release's ON CONFLICT (key) then had no
// unique index to infer (42P10), which failed every order an old pod took.
func TestCompatCheckFindsAMigrationThatBreaksThePreviousRelease(t *testing.T) {
	t.Parallel()
	problems := checkMigration(t, withFirstKeyScope(t), 7, compatReleases(t)[7])
	found := slices.ContainsFunc(problems, func(p string) bool {
		return strings.Contains(p, "after migration 00007") && strings.Contains(p, "SQLSTATE 42P10")
	})
	if !found {
		t.Errorf("the check of the first 00007 found %q, want the previous release's first write failing with 42P10", problems)
	}
}

// TestReleasesSinceTheKeyScopeRunWhereItsFirstMigrationRan: a database that
// applied 00007 as first released keeps its primary key on (scope, key) and
// has no unique index on key alone, since goose does not run 00007 again.
// Every later release must work there too.
func TestReleasesSinceTheKeyScopeRunWhereItsFirstMigrationRan(t *testing.T) {
	t.Parallel()
	releases, first := compatReleases(t), withFirstKeyScope(t)
	for _, v := range slices.Sorted(maps.Keys(releases)) {
		rel := releases[v]
		if v <= 7 {
			continue
		}
		t.Run(fmt.Sprintf("%05d", v), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := emptyDatabase(t)
			migrateTo(t, pool, first, 7)
			results, err := gooseProvider(t, pool, migrations.FS).Up(ctx)
			if err != nil {
				t.Fatalf("migrate after the first 00007: %v", err)
			}
			for _, r := range results {
				if r.Source.Version <= 7 {
					t.Errorf("migrate ran %s again", r.Source.Path)
				}
			}
			var pkey string
			if err := pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'idempotency_keys_pkey'`).Scan(&pkey); err != nil {
				t.Fatal(err)
			}
			if pkey != "PRIMARY KEY (scope, key)" {
				t.Errorf("idempotency_keys_pkey = %s, want the first 00007's PRIMARY KEY (scope, key)", pkey)
			}
			for _, problem := range rel.check(t, pool) {
				t.Error(problem)
			}
		})
	}
}

// TestKeyScopeGoesDownFromEitherShape: 00007's Down restores 00006's table,
// whether this file or its first release brought the database up; goose
// runs this file's Down on both.
func TestKeyScopeGoesDownFromEitherShape(t *testing.T) {
	t.Parallel()
	for name, fsys := range map[string]fs.FS{"this file": migrations.FS, "first release": withFirstKeyScope(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := emptyDatabase(t)
			migrateTo(t, pool, fsys, 7)
			if _, err := gooseProvider(t, pool, migrations.FS).DownTo(ctx, 6); err != nil {
				t.Fatalf("migrate down to 00006: %v", err)
			}
			var pkey string
			var scope bool
			if err := pool.QueryRow(ctx, `SELECT pg_get_constraintdef(c.oid),
				EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'idempotency_keys' AND column_name = 'scope')
				FROM pg_constraint c WHERE c.conname = 'idempotency_keys_pkey'`).Scan(&pkey, &scope); err != nil {
				t.Fatal(err)
			}
			if pkey != "PRIMARY KEY (key)" || scope {
				t.Errorf("after Down: idempotency_keys_pkey = %s, scope column %v; want PRIMARY KEY (key) and no scope", pkey, scope)
			}
		})
	}
}

// checkMigration migrates a new database up to the migration before
// version, seeds rel and runs its cases, applies version and runs them
// again. It returns one line per failed case.
func checkMigration(t *testing.T, fsys fs.FS, version int64, rel release) []string {
	t.Helper()
	pool := emptyDatabase(t)
	migrateTo(t, pool, fsys, version-1)
	var problems []string
	for _, p := range rel.check(t, pool) {
		problems = append(problems, fmt.Sprintf("before migration %05d, so %s is wrong: %s", version, rel.file, p))
	}
	migrateTo(t, pool, fsys, version)
	for _, p := range rel.run(pool) {
		problems = append(problems, fmt.Sprintf("after migration %05d: %s", version, p))
	}
	return problems
}

// emptyDatabase returns a new database with River's schema and none of the
// application's, as `checkout migrate` would find it before its first
// application migration. River's tables are there because a statement of
// the sweep reads river_job.
func emptyDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	if _, err := pool.Exec(ctx, "DROP SCHEMA public CASCADE; CREATE SCHEMA public"); err != nil {
		t.Fatalf("empty the database: %v", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("apply river schema: %v", err)
	}
	return pool
}

func gooseProvider(t *testing.T, pool *pgxpool.Pool, fsys fs.FS) *goose.Provider {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func migrateTo(t *testing.T, pool *pgxpool.Pool, fsys fs.FS, version int64) {
	t.Helper()
	if _, err := gooseProvider(t, pool, fsys).UpTo(context.Background(), version); err != nil {
		t.Fatalf("migrate up to %05d: %v", version, err)
	}
}

// withFirstKeyScope is the migrations up to 00007, with 00007 as it was
// first released.
func withFirstKeyScope(t *testing.T) fs.FS {
	t.Helper()
	first, err := os.ReadFile("testdata/00007_idempotency_key_scope_first_release.sql")
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{"00007_idempotency_key_scope.sql": &fstest.MapFile{Data: first}}
	for _, v := range migrationVersions(t, migrations.FS) {
		if v >= 7 {
			continue
		}
		names, err := fs.Glob(migrations.FS, fmt.Sprintf("%05d_*.sql", v))
		if err != nil || len(names) != 1 {
			t.Fatalf("migration %05d: %v %v", v, names, err)
		}
		data, err := fs.ReadFile(migrations.FS, names[0])
		if err != nil {
			t.Fatal(err)
		}
		out[names[0]] = &fstest.MapFile{Data: data}
	}
	return out
}

// migrationVersions lists the versions of the migrations in fsys, in order.
func migrationVersions(t *testing.T, fsys fs.FS) []int64 {
	t.Helper()
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var versions []int64
	for _, name := range names {
		v, err := migrationVersion(name)
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if len(versions) == 0 {
		t.Fatal("no migrations")
	}
	slices.Sort(versions)
	return versions
}

// migrationVersion is the number a migration's file name starts with.
func migrationVersion(name string) (int64, error) {
	prefix, _, _ := strings.Cut(path.Base(name), "_")
	v, err := strconv.ParseInt(prefix, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("migration %s: its name does not start with a version", name)
	}
	return v, nil
}

// release is the statements of the release before one migration.
type release struct {
	file  string
	seeds []block
	cases []block
}

// block is a seed or case of a compat file: its statements in order.
type block struct {
	name       string
	statements []statement
}

type statement struct {
	line int // where it starts in its file
	sql  string
}

var compatName = regexp.MustCompile(`^(\d{5})\.sql$`)

// compatReleases reads every file of migrations/compat, by the version of
// the migration it is checked against.
func compatReleases(t *testing.T) map[int64]release {
	t.Helper()
	entries, err := os.ReadDir(compatDir)
	if err != nil {
		t.Fatal(err)
	}
	releases := map[int64]release{}
	for _, e := range entries {
		m := compatName.FindStringSubmatch(e.Name())
		if m == nil {
			t.Fatalf("migrations/compat/%s: want NNNNN.sql, named after the migration it is checked against", e.Name())
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		data, err := os.ReadFile(compatDir + "/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		rel, err := parseRelease("migrations/compat/"+e.Name(), string(data))
		if err != nil {
			t.Fatal(err)
		}
		releases[v] = rel
	}
	return releases
}

// parseRelease reads a compat file: a header, then "-- seed: …" and
// "-- case: …" blocks of statements, each ending at a line ending in ";".
func parseRelease(file, text string) (release, error) {
	rel := release{file: file}
	var (
		current *[]block
		sql     strings.Builder
		start   int
	)
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		seed, isSeed := strings.CutPrefix(line, "-- seed: ")
		name, isCase := strings.CutPrefix(line, "-- case: ")
		switch {
		case isSeed || isCase:
			if sql.Len() > 0 {
				return rel, fmt.Errorf("%s:%d: the statement from line %d does not end in ;", file, n, start)
			}
			current = &rel.cases
			if isSeed {
				current, name = &rel.seeds, seed
			}
			*current = append(*current, block{name: name})
		case strings.TrimSpace(line) == "" && sql.Len() == 0, strings.HasPrefix(line, "--"):
		case current == nil:
			return rel, fmt.Errorf("%s:%d: a statement before the first -- seed: or -- case: line", file, n)
		default:
			if sql.Len() == 0 {
				start = n
			}
			sql.WriteString(line + "\n")
			if strings.HasSuffix(strings.TrimSpace(line), ";") {
				b := &(*current)[len(*current)-1]
				b.statements = append(b.statements, statement{line: start, sql: sql.String()})
				sql.Reset()
			}
		}
	}
	if sql.Len() > 0 {
		return rel, fmt.Errorf("%s:%d: the statement does not end in ;", file, start)
	}
	if len(rel.cases) == 0 {
		return rel, fmt.Errorf("%s: no -- case: blocks", file)
	}
	return rel, nil
}

// check seeds rel, failing the test if a seed fails, and runs its cases.
func (rel release) check(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	for _, b := range rel.seeds {
		if err := b.exec(pool, true); err != nil {
			t.Fatalf("%s, seed %q: %v", rel.file, b.name, err)
		}
	}
	return rel.run(pool)
}

// run runs every case of rel, each in a transaction rolled back after it,
// and returns one line per failed case.
func (rel release) run(pool *pgxpool.Pool) []string {
	var problems []string
	for _, b := range rel.cases {
		if err := b.exec(pool, false); err != nil {
			problems = append(problems, fmt.Sprintf("%s, case %q: %v", rel.file, b.name, err))
		}
	}
	return problems
}

// exec runs b's statements in one transaction, committed or rolled back.
func (b block) exec(pool *pgxpool.Pool, commit bool) error {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, s := range b.statements {
		if _, err := tx.Exec(ctx, s.sql); err != nil {
			return fmt.Errorf("line %d: %w", s.line, err)
		}
	}
	if commit {
		return tx.Commit(ctx)
	}
	return nil
}
