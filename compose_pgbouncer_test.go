package checkout_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
)

// pgbouncerProfile is the compose profile that puts PgBouncer in front of a
// second checkout and worker (docs/operations.md, "PgBouncer").
const pgbouncerProfile = "pgbouncer"

// pooledServices are the application services of the profile, with the
// variables docs/operations.md says a process behind PgBouncer needs.
var pooledServices = map[string]map[string]string{
	"checkout-pgbouncer": {"DB_STATEMENT_TIMEOUT": "0"},
	"worker-pgbouncer":   {"DB_STATEMENT_TIMEOUT": "0", "RIVER_POLL_ONLY": "true"},
}

func TestComposePgBouncerProfile(t *testing.T) {
	t.Parallel()
	project := loadCompose(t, "docker-compose.yml", nil, pgbouncerProfile)
	for _, err := range checkCompose(project) {
		t.Error(err)
	}
	for _, err := range checkPgBouncer(project) {
		t.Error(err)
	}
}

func TestComposePgBouncerIsOptIn(t *testing.T) {
	t.Parallel()
	project := loadCompose(t, "docker-compose.yml", nil)
	for _, name := range []string{"pgbouncer", "pgbouncer-role", "checkout-pgbouncer", "worker-pgbouncer"} {
		if _, ok := project.Services[name]; ok {
			t.Errorf("%s runs without --profile %s", name, pgbouncerProfile)
		}
		if _, ok := project.DisabledServices[name]; !ok {
			t.Errorf("%s: not defined in docker-compose.yml", name)
		}
	}
}

// TestComposePgBouncerCheckCatchesBreakage proves checkPgBouncer can fail.
func TestComposePgBouncerCheckCatchesBreakage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, old, new, wantErr string
	}{
		{
			name: "worker listens", file: "docker-compose.yml",
			old: `      RIVER_POLL_ONLY: "true"`, new: `      RIVER_POLL_ONLY: "false"`,
			wantErr: `worker-pgbouncer: RIVER_POLL_ONLY = "false", want "true"`,
		},
		{
			name: "prepared statements", file: "docker-compose.yml",
			old: "&default_query_exec_mode=exec", new: "",
			wantErr: "checkout-pgbouncer: DATABASE_URL default_query_exec_mode",
		},
		{
			name: "session pooling", file: "deploy/pgbouncer/pgbouncer.ini",
			old: "pool_mode = transaction", new: "pool_mode = session",
			wantErr: "pgbouncer.ini: no `pool_mode = transaction`",
		},
		{
			name: "migrate through the bouncer", file: "docker-compose.yml",
			old:     "    command: [\"migrate\"]\n    environment:\n      DATABASE_URL: *database-url",
			new:     "    command: [\"migrate\"]\n    environment:\n      DATABASE_URL: postgres://checkout:checkout@pgbouncer:6432/checkout",
			wantErr: "migrate: DATABASE_URL must point at postgres",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := copyComposeTree(t)
			path := filepath.Join(dir, tt.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tt.old) {
				t.Fatalf("%s no longer contains %q; update this test", tt.file, tt.old)
			}
			writeFile(t, path, strings.Replace(string(b), tt.old, tt.new, 1))
			errs := checkPgBouncer(loadCompose(t, filepath.Join(dir, "docker-compose.yml"), nil, pgbouncerProfile))
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.wantErr) }) {
				t.Errorf("errors %v, want one containing %q", errs, tt.wantErr)
			}
		})
	}
}

// copyComposeTree copies what the profile reads into a temporary directory.
func copyComposeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"docker-compose.yml", "Dockerfile", "deploy/pgbouncer/pgbouncer.ini", "deploy/pgbouncer/Dockerfile"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, f), string(b))
	}
	return dir
}

// checkPgBouncer returns every rule of docs/operations.md's PgBouncer section the
// profile breaks.
func checkPgBouncer(p *types.Project) []error {
	var errs []error
	fail := func(service, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", service, fmt.Sprintf(format, args...)))
	}
	bouncer, ok := p.Services["pgbouncer"]
	if !ok {
		fail("pgbouncer", "service missing with --profile %s", pgbouncerProfile)
		return errs
	}
	if bouncer.HealthCheck == nil || len(bouncer.HealthCheck.Test) == 0 {
		fail("pgbouncer", "no healthcheck")
	}
	if bouncer.Build == nil {
		fail("pgbouncer", "not built from deploy/pgbouncer")
	} else if ini, err := os.ReadFile(filepath.Join(bouncer.Build.Context, "pgbouncer.ini")); err != nil {
		fail("pgbouncer", "%v", err)
	} else if !strings.Contains(string(ini), "\npool_mode = transaction\n") {
		fail("pgbouncer.ini", "no `pool_mode = transaction`: the profile exists to show transaction pooling")
	}
	requireDependency(bouncer, "pgbouncer-role", types.ServiceConditionCompletedSuccessfully, fail)
	if u := p.Services["migrate"].Environment["DATABASE_URL"]; u == nil || !strings.Contains(*u, "@postgres:5432/") {
		fail("migrate", "DATABASE_URL must point at postgres: the migration holds a session advisory lock")
	}

	for name, want := range pooledServices {
		s, ok := p.Services[name]
		if !ok {
			fail(name, "service missing with --profile %s", pgbouncerProfile)
			continue
		}
		requireDependency(s, "pgbouncer", types.ServiceConditionHealthy, fail)
		requireDependency(s, "migrate", types.ServiceConditionCompletedSuccessfully, fail)
		for k, v := range want {
			if got := s.Environment[k]; got == nil || *got != v {
				fail(name, "%s = %q, want %q", k, deref(got), v)
			}
		}
		raw := s.Environment["DATABASE_URL"]
		u, err := url.Parse(deref(raw))
		switch {
		case err != nil || raw == nil:
			fail(name, "DATABASE_URL %q does not parse", deref(raw))
		case u.Host != "pgbouncer:6432":
			fail(name, "DATABASE_URL host %q, want pgbouncer:6432", u.Host)
		case u.Query().Get("default_query_exec_mode") != "exec":
			fail(name, "DATABASE_URL default_query_exec_mode %q, want exec: PgBouncer 1.18 has no prepared statements",
				u.Query().Get("default_query_exec_mode"))
		}
	}
	return errs
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
