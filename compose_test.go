package checkout_test

// These tests load docker-compose.yml with compose-go, the loader docker
// compose itself uses, and check the wiring the demo depends on. No Docker
// engine is needed, so they run everywhere `make test` runs.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// longRunning are the services that must report health and restart.
var longRunning = []string{"postgres", "paymentsim", "checkout", "worker"}

// appServices maps each application service to its Dockerfile target,
// listen port and the variables its binary needs in compose.
var appServices = map[string]struct {
	target string
	port   string
	env    []string
}{
	"checkout":   {target: "checkout", port: "8080", env: []string{"HTTP_ADDR", "DATABASE_URL", "PAYMENT_URL", "RESILIENCE_MODE"}},
	"worker":     {target: "worker", port: "8081", env: []string{"HTTP_ADDR", "DATABASE_URL", "PAYMENT_URL"}},
	"paymentsim": {target: "paymentsim", port: "8082", env: []string{"HTTP_ADDR"}},
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	project := loadCompose(t, "docker-compose.yml", nil)
	for _, err := range checkCompose(project) {
		t.Error(err)
	}
}

func TestComposePostgresImageIsOverridable(t *testing.T) {
	t.Parallel()
	if got, want := loadCompose(t, "docker-compose.yml", nil).Services["postgres"].Image, "postgres:17-alpine"; got != want {
		t.Errorf("default postgres image = %q, want %q", got, want)
	}
	project := loadCompose(t, "docker-compose.yml", []string{"POSTGRES_IMAGE=postgres:15-alpine"})
	if got, want := project.Services["postgres"].Image, "postgres:15-alpine"; got != want {
		t.Errorf("postgres image with POSTGRES_IMAGE set = %q, want %q", got, want)
	}
}

// TestComposeCheckCatchesBreakage proves the checks above can fail: each
// case breaks docker-compose.yml the way a careless edit would.
func TestComposeCheckCatchesBreakage(t *testing.T) {
	t.Parallel()
	original, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, old, new, wantErr string
	}{
		{
			name:    "postgres healthcheck removed",
			old:     "    healthcheck:\n      test: [\"CMD-SHELL\", \"pg_isready -U checkout -d checkout\"]\n      interval: 2s\n      timeout: 3s\n      retries: 30\n",
			wantErr: "postgres: no healthcheck",
		},
		{
			name:    "checkout does not wait for migrations",
			old:     "      migrate:\n        condition: service_completed_successfully\n    ports:\n      - \"8080:8080\"",
			new:     "      migrate:\n        condition: service_started\n    ports:\n      - \"8080:8080\"",
			wantErr: "checkout: depends on migrate with condition service_started",
		},
		{
			name:    "migrate starts before postgres is healthy",
			old:     "    command: [\"migrate\"]\n    environment:\n      DATABASE_URL: *database-url\n    depends_on:\n      postgres:\n        condition: service_healthy",
			new:     "    command: [\"migrate\"]\n    environment:\n      DATABASE_URL: *database-url\n    depends_on:\n      postgres:\n        condition: service_started",
			wantErr: "migrate: depends on postgres with condition service_started",
		},
		{
			name:    "worker loses PAYMENT_URL",
			old:     "      HTTP_ADDR: \":8081\"\n      DATABASE_URL: *database-url\n      PAYMENT_URL: http://paymentsim:8082\n",
			new:     "      HTTP_ADDR: \":8081\"\n      DATABASE_URL: *database-url\n",
			wantErr: "worker: PAYMENT_URL not set",
		},
		{
			name:    "build target that the Dockerfile lacks",
			old:     "      target: worker",
			new:     "      target: wrker",
			wantErr: `worker: build target "wrker" not in Dockerfile`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(string(original), tt.old) {
				t.Fatalf("docker-compose.yml no longer contains the text this case edits:\n%s", tt.old)
			}
			dir := t.TempDir()
			broken := strings.Replace(string(original), tt.old, tt.new, 1)
			writeFile(t, filepath.Join(dir, "docker-compose.yml"), broken)
			dockerfile, err := os.ReadFile("Dockerfile")
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "Dockerfile"), string(dockerfile))

			errs := checkCompose(loadCompose(t, filepath.Join(dir, "docker-compose.yml"), nil))
			var got []string
			for _, err := range errs {
				got = append(got, err.Error())
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tt.wantErr) }) {
				t.Errorf("got errors %q, want one containing %q", got, tt.wantErr)
			}
		})
	}
}

func loadCompose(t *testing.T, path string, env []string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{path},
		cli.WithWorkingDirectory(filepath.Dir(path)),
		cli.WithEnv(env),
		cli.WithName("checkout"),
	)
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return project
}

// checkCompose returns every wiring rule project breaks.
func checkCompose(p *types.Project) []error {
	var errs []error
	fail := func(service, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", service, fmt.Sprintf(format, args...)))
	}
	service := func(name string) types.ServiceConfig {
		s, ok := p.Services[name]
		if !ok {
			fail(name, "service missing")
		}
		return s
	}

	for _, name := range longRunning {
		s := service(name)
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
			fail(name, "no healthcheck")
		}
		if s.Restart == "" || s.Restart == "no" {
			fail(name, "no restart policy")
		}
	}
	if hc := service("postgres").HealthCheck; hc != nil && !strings.Contains(strings.Join(hc.Test, " "), "pg_isready") {
		fail("postgres", "healthcheck %q does not use pg_isready", hc.Test)
	}
	if !slices.ContainsFunc(service("postgres").Volumes, func(v types.ServiceVolumeConfig) bool { return v.Type == types.VolumeTypeVolume }) {
		fail("postgres", "data is not on a named volume")
	}

	migrate := service("migrate")
	requireDependency(migrate, "postgres", types.ServiceConditionHealthy, fail)
	if got := strings.Join(migrate.Command, " "); got != "migrate" {
		fail("migrate", "command %q, want migrate", got)
	}
	if migrate.Build == nil || migrate.Build.Target != "checkout" {
		fail("migrate", "must run the checkout image")
	}
	if migrate.Restart != "no" {
		fail("migrate", "one-shot job must not restart (restart: %q)", migrate.Restart)
	}

	targets := dockerfileTargets(p, fail)
	for name, want := range appServices {
		s := service(name)
		checkBuild(s, want.target, targets, fail)
		checkEnvironment(s, want.env, fail)
		if addr := s.Environment["HTTP_ADDR"]; addr != nil && !strings.HasSuffix(*addr, ":"+want.port) {
			fail(name, "HTTP_ADDR %q does not listen on %s", *addr, want.port)
		}
		if !slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool { return pc.Published == want.port }) {
			fail(name, "port %s not published", want.port)
		}
		if hc := s.HealthCheck; hc != nil && !strings.HasSuffix(strings.Join(hc.Test, " "), name+" healthcheck") {
			fail(name, "healthcheck %q does not run `%s healthcheck`", hc.Test, name)
		}
	}
	for _, name := range []string{"checkout", "worker"} {
		s := service(name)
		requireDependency(s, "postgres", types.ServiceConditionHealthy, fail)
		requireDependency(s, "migrate", types.ServiceConditionCompletedSuccessfully, fail)
		if u := s.Environment["DATABASE_URL"]; u != nil && !strings.Contains(*u, "@postgres:5432/") {
			fail(name, "DATABASE_URL does not point at the postgres service")
		}
		if u := s.Environment["PAYMENT_URL"]; u != nil && *u != "http://paymentsim:"+appServices["paymentsim"].port {
			fail(name, "PAYMENT_URL %q does not point at the paymentsim service", *u)
		}
	}
	return errs
}

func requireDependency(s types.ServiceConfig, on, condition string, fail func(string, string, ...any)) {
	dep, ok := s.DependsOn[on]
	switch {
	case !ok:
		fail(s.Name, "does not depend on %s", on)
	case dep.Condition != condition:
		fail(s.Name, "depends on %s with condition %s, want %s", on, dep.Condition, condition)
	}
}

func checkBuild(s types.ServiceConfig, target string, targets []string, fail func(string, string, ...any)) {
	if s.Build == nil {
		fail(s.Name, "not built from the Dockerfile")
		return
	}
	if _, err := os.Stat(s.Build.Context); err != nil {
		fail(s.Name, "build context %s: %v", s.Build.Context, err)
	}
	if !slices.Contains(targets, s.Build.Target) {
		fail(s.Name, "build target %q not in Dockerfile", s.Build.Target)
	}
	if s.Build.Target != target {
		fail(s.Name, "build target %q, want %q", s.Build.Target, target)
	}
}

func checkEnvironment(s types.ServiceConfig, names []string, fail func(string, string, ...any)) {
	for _, name := range names {
		if v, ok := s.Environment[name]; !ok || v == nil || *v == "" {
			fail(s.Name, "%s not set", name)
		}
	}
}

var fromAs = regexp.MustCompile(`(?im)^FROM\s+\S+\s+AS\s+(\S+)\s*$`)

// dockerfileTargets lists the stage names of the Dockerfile next to the
// compose file.
func dockerfileTargets(p *types.Project, fail func(string, string, ...any)) []string {
	b, err := os.ReadFile(filepath.Join(p.WorkingDir, "Dockerfile"))
	if err != nil {
		fail("Dockerfile", "%v", err)
		return nil
	}
	var targets []string
	for _, m := range fromAs.FindAllStringSubmatch(string(b), -1) {
		targets = append(targets, m[1])
	}
	return targets
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
