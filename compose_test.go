package checkout_test

// These tests load docker-compose.yml with compose-go, the loader docker
// compose itself uses, and check the wiring the demo depends on. No Docker
// engine is needed, so they run everywhere `make test` runs.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"
)

// longRunning are the services that must report health and restart.
var longRunning = []string{"postgres", "paymentsim", "catalogsim", "devissuer", "checkout", "worker"}

// appServices maps each application service to its Dockerfile target,
// listen port and the variables its binary needs in compose.
// A scalable service (`docker compose up --scale worker=2`) must not publish
// a fixed host port, which only one replica could bind.
var appServices = map[string]struct {
	target   string
	port     string
	env      []string
	scalable bool
}{
	"checkout":   {target: "checkout", port: "8080", env: []string{"HTTP_ADDR", "DATABASE_URL", "STRIPE_API_BASE", "CATALOG_URL", "RESILIENCE_MODE"}},
	"worker":     {target: "worker", port: "8081", env: []string{"HTTP_ADDR", "DATABASE_URL", "STRIPE_API_BASE"}, scalable: true},
	"paymentsim": {target: "paymentsim", port: "8082", env: []string{"HTTP_ADDR"}},
	"catalogsim": {target: "catalogsim", port: "8083", env: []string{"HTTP_ADDR"}},
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	for _, err := range checkComposeFile(t, "docker-compose.yml") {
		t.Error(err)
	}
}

// checkComposeFile loads path with every profile and checks it twice: with
// the shell's environment empty (the demo's defaults) and with every
// credential variable set, to see that each credential comes from it.
func checkComposeFile(t *testing.T, path string) []error {
	t.Helper()
	profiles := []string{observability, fleet}
	errs := checkCompose(loadCompose(t, path, nil, profiles...))
	var env []string
	for _, c := range credentials {
		env = append(env, c.shellVar+"=from-the-shell-"+c.shellVar)
	}
	return append(errs, checkCredentialSource(loadCompose(t, path, env, profiles...))...)
}

// credentials are the settings that guard what can move money or jobs
// (docs/design.md, "Invariants"): each service gets a demo value that the shell's
// variable of the same purpose overrides.
var credentials = []struct {
	service, variable, shellVar string
}{
	{"paymentsim", "PAYMENTSIM_ADMIN_TOKEN", "PAYMENTSIM_ADMIN_TOKEN"},
	{"catalogsim", "CATALOGSIM_ADMIN_TOKEN", "CATALOGSIM_ADMIN_TOKEN"},
	{"worker", "RIVERUI_USER", "RIVERUI_USER"},
	{"worker", "RIVERUI_PASSWORD", "RIVERUI_PASSWORD"},
	{"grafana", "GF_SECURITY_ADMIN_PASSWORD", "GRAFANA_ADMIN_PASSWORD"},
}

// checkCredentialSource checks that each credential is the value of its
// shell variable, set as checkComposeFile sets it.
func checkCredentialSource(p *types.Project) []error {
	var errs []error
	for _, c := range credentials {
		s, ok := p.Services[c.service]
		if !ok {
			continue // checkCompose reports missing services
		}
		want := "from-the-shell-" + c.shellVar
		if v := s.Environment[c.variable]; v == nil || *v != want {
			errs = append(errs, fmt.Errorf("%s: %s does not come from the shell's %s", c.service, c.variable, c.shellVar))
		}
	}
	return errs
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
			old:     "    healthcheck:\n      # Over TCP",
			new:     "    x-healthcheck:\n      # Over TCP",
			wantErr: "postgres: no healthcheck",
		},
		{
			name:    "postgres healthcheck on the Unix socket",
			old:     "pg_isready -h 127.0.0.1 -p 5432 -U checkout",
			new:     "pg_isready -U checkout",
			wantErr: `postgres: healthcheck ["CMD-SHELL" "pg_isready -U checkout -d checkout"] checks the Unix socket`,
		},
		{
			name:    "postgres healthcheck on a socket directory",
			old:     "pg_isready -h 127.0.0.1 -p 5432",
			new:     "pg_isready -h /var/run/postgresql -p 5432",
			wantErr: "checks the Unix socket",
		},
		{
			name:    "migrate gives up at the first refused connection",
			old:     "      MIGRATE_WAIT: 60s\n",
			wantErr: "migrate: MIGRATE_WAIT not set",
		},
		{
			name:    "migrate waits too little",
			old:     "      MIGRATE_WAIT: 60s\n",
			new:     "      MIGRATE_WAIT: 2s\n",
			wantErr: `migrate: MIGRATE_WAIT "2s", want at least 30s`,
		},
		{
			name:    "checkout does not wait for migrations",
			old:     "    migrate:\n      condition: service_completed_successfully\n    catalogsim:\n      condition: service_healthy\n    # Checkout would",
			new:     "    migrate:\n      condition: service_started\n    catalogsim:\n      condition: service_healthy\n    # Checkout would",
			wantErr: "checkout: depends on migrate with condition service_started",
		},
		{
			name:    "the demo without the price check",
			old:     "    CATALOG_URL: http://catalogsim:8083\n",
			new:     "",
			wantErr: "checkout: CATALOG_URL does not point at the catalogsim service",
		},
		{
			name:    "catalog admin API on every interface",
			old:     "      - \"127.0.0.1:8083:8083\"",
			new:     "      - \"8083:8083\"",
			wantErr: "catalogsim: publishes port 8083 on every interface",
		},
		{
			name:    "migrate starts before postgres is healthy",
			old:     "      MIGRATE_WAIT: 60s\n    depends_on:\n      postgres:\n        condition: service_healthy",
			new:     "      MIGRATE_WAIT: 60s\n    depends_on:\n      postgres:\n        condition: service_started",
			wantErr: "migrate: depends on postgres with condition service_started",
		},
		{
			name:    "worker loses STRIPE_API_BASE",
			old:     "      HTTP_ADDR: \":8081\"\n      DATABASE_URL: *database-url\n      STRIPE_API_BASE: http://paymentsim:8082\n",
			new:     "      HTTP_ADDR: \":8081\"\n      DATABASE_URL: *database-url\n",
			wantErr: "worker: STRIPE_API_BASE not set",
		},
		{
			name:    "build target that the Dockerfile lacks",
			old:     "      target: worker",
			new:     "      target: wrker",
			wantErr: `worker: build target "wrker" not in Dockerfile`,
		},
		{
			name:    "simulator admin API on every interface",
			old:     `"127.0.0.1:8082:8082"`,
			new:     `"8082:8082"`,
			wantErr: "paymentsim: publishes port 8082 on every interface",
		},
		{
			name:    "checkout API on every interface",
			old:     `"127.0.0.1:8080:8080"`,
			new:     `"0.0.0.0:8080:8080"`,
			wantErr: "checkout: publishes port 8080 on every interface",
		},
		{
			name:    "worker (River UI) on every interface",
			old:     `"127.0.0.1::8081"`,
			new:     `"8081"`,
			wantErr: "worker: publishes port 8081 on every interface",
		},
		{
			name:    "worker on a fixed host port",
			old:     `"127.0.0.1::8081"`,
			new:     `"127.0.0.1:8081:8081"`,
			wantErr: "worker: publishes fixed host port 8081: `--scale worker=2` fails on it",
		},
		{
			name:    "fleet load balancer on every interface",
			old:     "    ports:\n      - \"127.0.0.1:8080:8080\"\n    healthcheck:\n      test: [\"CMD\", \"wget\"",
			new:     "    ports:\n      - \"8080:8080\"\n    healthcheck:\n      test: [\"CMD\", \"wget\"",
			wantErr: "lb: publishes port 8080 on every interface",
		},
		{
			name:    "postgres on every interface",
			old:     `"127.0.0.1:5432:5432"`,
			new:     `"5432:5432"`,
			wantErr: "postgres: publishes port 5432 on every interface",
		},
		{
			name:    "prometheus on every interface",
			old:     `"127.0.0.1:9090:9090"`,
			new:     `"9090:9090"`,
			wantErr: "prometheus: publishes port 9090 on every interface",
		},
		{
			name:    "grafana on every interface",
			old:     `"127.0.0.1:3000:3000"`,
			new:     `"3000:3000"`,
			wantErr: "grafana: publishes port 3000 on every interface",
		},
		{
			name:    "simulator admin API without a token",
			old:     "      PAYMENTSIM_ADMIN_TOKEN: ${PAYMENTSIM_ADMIN_TOKEN:-demo-admin-token}\n",
			wantErr: "paymentsim: PAYMENTSIM_ADMIN_TOKEN not set",
		},
		{
			name:    "simulator admin token empty by default",
			old:     "${PAYMENTSIM_ADMIN_TOKEN:-demo-admin-token}",
			new:     "${PAYMENTSIM_ADMIN_TOKEN:-}",
			wantErr: "paymentsim: PAYMENTSIM_ADMIN_TOKEN not set",
		},
		{
			name:    "River UI without a password",
			old:     "      RIVERUI_PASSWORD: ${RIVERUI_PASSWORD:-demo-riverui-password}\n",
			wantErr: "worker: RIVERUI_PASSWORD not set",
		},
		{
			name:    "River UI without a user",
			old:     "      RIVERUI_USER: ${RIVERUI_USER:-admin}\n",
			wantErr: "worker: RIVERUI_USER not set",
		},
		{
			name:    "issuer URL as the host sees it",
			old:     "x-issuer-url: &issuer-url http://devissuer:8084",
			new:     "x-issuer-url: &issuer-url http://127.0.0.1:8084",
			wantErr: `devissuer: DEVISSUER_ISSUER "http://127.0.0.1:8084", want "http://devissuer:8084"`,
		},
		{
			name:    "checkout trusts another issuer than devissuer's tokens name",
			old:     "    AUTH_ISSUER: *issuer-url\n    AUTH_AUDIENCE: &audience checkout\n",
			new:     "    AUTH_ISSUER: http://localhost:8084\n    AUTH_AUDIENCE: &audience checkout\n",
			wantErr: `checkout: AUTH_ISSUER "http://localhost:8084" is not devissuer's DEVISSUER_ISSUER "http://devissuer:8084"`,
		},
		{
			name:    "the demo without authentication",
			old:     "    AUTH_ISSUER: *issuer-url\n    AUTH_AUDIENCE: &audience checkout\n",
			new:     "    AUTH_AUDIENCE: &audience checkout\n",
			wantErr: "checkout: AUTH_ISSUER not set",
		},
		{
			name:    "another audience",
			old:     "      DEVISSUER_AUDIENCE: *audience\n",
			new:     "      DEVISSUER_AUDIENCE: payments\n",
			wantErr: `checkout: AUTH_AUDIENCE "checkout" is not devissuer's DEVISSUER_AUDIENCE "payments"`,
		},
		{
			name:    "development issuer on every interface",
			old:     `"127.0.0.1:8084:8084"`,
			new:     `"8084:8084"`,
			wantErr: "devissuer: publishes port 8084 on every interface",
		},
		{
			name:    "checkout does not wait for the issuer",
			old:     "    devissuer:\n      condition: service_healthy\n  healthcheck:",
			new:     "    devissuer:\n      condition: service_started\n  healthcheck:",
			wantErr: "checkout: depends on devissuer with condition service_started",
		},
		{
			name:    "Prometheus lifecycle API enabled",
			old:     "      - --storage.tsdb.retention.time=1d\n",
			new:     "      - --storage.tsdb.retention.time=1d\n      - --web.enable-lifecycle\n",
			wantErr: "prometheus: --web.enable-lifecycle",
		},
		{
			name:    "Grafana's admin password hard-coded",
			old:     "${GRAFANA_ADMIN_PASSWORD:-demo-grafana-password}",
			new:     "demo-grafana-password",
			wantErr: "grafana: GF_SECURITY_ADMIN_PASSWORD does not come from the shell's GRAFANA_ADMIN_PASSWORD",
		},
		{
			name:    "Grafana's admin password admin by default",
			old:     "${GRAFANA_ADMIN_PASSWORD:-demo-grafana-password}",
			new:     "${GRAFANA_ADMIN_PASSWORD:-admin}",
			wantErr: `grafana: GF_SECURITY_ADMIN_PASSWORD is "admin"`,
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

			errs := checkComposeFile(t, filepath.Join(dir, "docker-compose.yml"))
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

func loadCompose(t *testing.T, path string, env []string, profiles ...string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{path},
		cli.WithWorkingDirectory(filepath.Dir(path)),
		cli.WithEnv(env),
		cli.WithName("checkout"),
		cli.WithProfiles(profiles),
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
	if hc := service("postgres").HealthCheck; hc != nil {
		test := strings.Join(hc.Test, " ")
		if !strings.Contains(test, "pg_isready") {
			fail("postgres", "healthcheck %q does not use pg_isready", hc.Test)
		}
		// The services connect over TCP; the Unix socket answers while
		// the first initialisation's temporary server runs, before TCP.
		if !tcpHost.MatchString(test) {
			fail("postgres", "healthcheck %q checks the Unix socket; add -h 127.0.0.1 to check TCP as the services connect", hc.Test)
		}
	}
	if !slices.ContainsFunc(service("postgres").Volumes, func(v types.ServiceVolumeConfig) bool { return v.Type == types.VolumeTypeVolume }) {
		fail("postgres", "data is not on a named volume")
	}

	// docs/design.md, "Invariants": what can move money or jobs needs a credential
	// and, in the demo, listens on the loopback interface only.
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		for _, pc := range p.Services[name].Ports {
			if pc.HostIP != "127.0.0.1" {
				fail(name, "publishes port %s on every interface (host_ip %q); bind it to 127.0.0.1", cmp.Or(pc.Published, fmt.Sprint(pc.Target)), pc.HostIP)
			}
		}
	}
	for _, c := range credentials {
		if s, ok := p.Services[c.service]; ok {
			checkEnvironment(s, []string{c.variable}, fail)
		}
	}
	if s, ok := p.Services["prometheus"]; ok && slices.ContainsFunc(s.Command, func(arg string) bool { return strings.HasPrefix(arg, "--web.enable-lifecycle") }) {
		fail("prometheus", "--web.enable-lifecycle lets anyone who reaches the port stop Prometheus (POST /-/quit)")
	}
	if s, ok := p.Services["grafana"]; ok {
		if v := s.Environment["GF_SECURITY_ADMIN_PASSWORD"]; v != nil && *v == "admin" {
			fail("grafana", "GF_SECURITY_ADMIN_PASSWORD is %q, Grafana's well-known default", *v)
		}
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
	if v := migrate.Environment["MIGRATE_WAIT"]; v == nil {
		fail("migrate", "MIGRATE_WAIT not set: a database that refuses connections for a moment fails the stack's start")
	} else if d, err := time.ParseDuration(*v); err != nil || d < 30*time.Second {
		fail("migrate", "MIGRATE_WAIT %q, want at least 30s of retrying a starting database", *v)
	}

	targets := dockerfileTargets(p, fail)
	for name, want := range appServices {
		s := service(name)
		checkBuild(s, want.target, targets, fail)
		checkEnvironment(s, want.env, fail)
		if addr := s.Environment["HTTP_ADDR"]; addr != nil && !strings.HasSuffix(*addr, ":"+want.port) {
			fail(name, "HTTP_ADDR %q does not listen on %s", *addr, want.port)
		}
		switch {
		case want.scalable:
			for _, pc := range s.Ports {
				if pc.Published != "" && !strings.Contains(pc.Published, "-") {
					fail(name, "publishes fixed host port %s: `--scale %s=2` fails on it; leave the host port out (or give a range)", pc.Published, name)
				}
			}
			if !slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool { return fmt.Sprint(pc.Target) == want.port }) {
				fail(name, "port %s not published", want.port)
			}
		case !slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool { return pc.Published == want.port }):
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
		if u := s.Environment["STRIPE_API_BASE"]; u != nil && *u != "http://paymentsim:"+appServices["paymentsim"].port {
			fail(name, "STRIPE_API_BASE %q does not point at the paymentsim service", *u)
		}
	}
	// The demo runs with the price check on (docs/design.md, "Catalog protocol").
	if u := service("checkout").Environment["CATALOG_URL"]; u == nil || *u != "http://catalogsim:"+appServices["catalogsim"].port {
		fail("checkout", "CATALOG_URL does not point at the catalogsim service")
	}
	requireDependency(service("checkout"), "catalogsim", types.ServiceConditionHealthy, fail)
	checkouts := []types.ServiceConfig{service("checkout")}
	for _, name := range []string{"checkout-fleet", "checkout-pgbouncer"} {
		if s, ok := p.Services[name]; ok { // when its profile is loaded
			checkouts = append(checkouts, s)
		}
	}
	checkIssuer(service("devissuer"), targets, fail, checkouts...)
	return errs
}

// checkIssuer checks the demo's authentication (docs/design.md,
// "Authentication"): the development issuer is built from the Dockerfile,
// listens on 8084, published on loopback only (checked above with every
// port), and each checkout verifies its tokens. A token's iss is
// DEVISSUER_ISSUER and checkout accepts only iss equal to AUTH_ISSUER, from
// which it also fetches the keys, so the two must be the same string, and
// one that names the issuer's service: a host address such as
// 127.0.0.1:8084 would be checkout's own container.
func checkIssuer(issuer types.ServiceConfig, targets []string, fail func(string, string, ...any), checkouts ...types.ServiceConfig) {
	checkBuild(issuer, "devissuer", targets, fail)
	checkEnvironment(issuer, []string{"DEVISSUER_ADDR", "DEVISSUER_ISSUER", "DEVISSUER_AUDIENCE"}, fail)
	if addr := issuer.Environment["DEVISSUER_ADDR"]; addr != nil && *addr != ":8084" {
		fail(issuer.Name, "DEVISSUER_ADDR %q, want :8084 (every interface of its container: checkout connects from another)", *addr)
	}
	if !slices.ContainsFunc(issuer.Ports, func(pc types.ServicePortConfig) bool { return pc.Published == "8084" }) {
		fail(issuer.Name, "port 8084 not published: the walkthrough gets its token from 127.0.0.1:8084")
	}
	if hc := issuer.HealthCheck; hc == nil || !strings.HasSuffix(strings.Join(hc.Test, " "), "devissuer healthcheck") {
		fail(issuer.Name, "healthcheck does not run `devissuer healthcheck`")
	}
	var iss, aud string
	if v := issuer.Environment["DEVISSUER_ISSUER"]; v != nil {
		iss = *v
	}
	if v := issuer.Environment["DEVISSUER_AUDIENCE"]; v != nil {
		aud = *v
	}
	if want := "http://" + issuer.Name + ":8084"; iss != want {
		fail(issuer.Name, "DEVISSUER_ISSUER %q, want %q: the URL checkout reaches it at, inside compose", iss, want)
	}
	for _, s := range checkouts {
		checkEnvironment(s, []string{"AUTH_ISSUER", "AUTH_AUDIENCE"}, fail)
		if v := s.Environment["AUTH_ISSUER"]; v != nil && *v != iss {
			fail(s.Name, "AUTH_ISSUER %q is not devissuer's DEVISSUER_ISSUER %q: every token's iss would be refused", *v, iss)
		}
		if v := s.Environment["AUTH_AUDIENCE"]; v != nil && *v != aud {
			fail(s.Name, "AUTH_AUDIENCE %q is not devissuer's DEVISSUER_AUDIENCE %q: every token's aud would be refused", *v, aud)
		}
		requireDependency(s, "devissuer", types.ServiceConditionHealthy, fail)
	}
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

// tcpHost matches a pg_isready host option naming a TCP host, not a socket
// directory.
var tcpHost = regexp.MustCompile(`(^|\s)(-h\s*|--host[= ])[^/\s]`)

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

// observability is the compose profile that adds Prometheus, Grafana and
// Jaeger.
const observability = "observability"

// observabilityServices maps each service of the profile to its published
// port and the files of deploy/ it must mount (container path → repository
// path).
var observabilityServices = map[string]struct {
	port   string
	mounts map[string]string
}{
	"prometheus": {port: "9090", mounts: map[string]string{
		"/etc/prometheus/prometheus.yml": "deploy/prometheus/prometheus.yml",
		"/etc/prometheus/alerts.yml":     "deploy/prometheus/alerts.yml",
	}},
	"grafana": {port: "3000", mounts: map[string]string{
		"/etc/grafana/provisioning/datasources": "deploy/grafana/provisioning/datasources",
		"/etc/grafana/provisioning/dashboards":  "deploy/grafana/provisioning/dashboards",
		"/var/lib/grafana/dashboards":           "deploy/grafana/dashboards",
	}},
	"jaeger": {port: "16686"},
}

func TestComposeObservabilityProfile(t *testing.T) {
	t.Parallel()
	project := loadCompose(t, "docker-compose.yml", nil, observability)
	for _, err := range checkCompose(project) {
		t.Error(err)
	}
	for _, err := range checkObservability(project) {
		t.Error(err)
	}
}

func TestComposeObservabilityIsOptIn(t *testing.T) {
	t.Parallel()
	project := loadCompose(t, "docker-compose.yml", nil)
	for name := range observabilityServices {
		if _, ok := project.Services[name]; ok {
			t.Errorf("%s runs without --profile %s; the demo's default stack must stay small", name, observability)
		}
		if _, ok := project.DisabledServices[name]; !ok {
			t.Errorf("%s: not defined in docker-compose.yml", name)
		}
	}
}

// TestComposeObservabilityCheckCatchesBreakage proves checkObservability can
// fail, editing the files the way a careless change would.
func TestComposeObservabilityCheckCatchesBreakage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, old, new, wantErr string
	}{
		{
			name: "image not pinned", file: "docker-compose.yml",
			old: "image: prom/prometheus:v3.5.0", new: "image: prom/prometheus:latest",
			wantErr: `prometheus: image "prom/prometheus:latest" is not pinned`,
		},
		{
			name: "scrape target port differs from compose", file: "deploy/prometheus/prometheus.yml",
			old: `targets: ["checkout:8080"]`, new: `targets: ["checkout:9091"]`,
			wantErr: `scrape target "checkout:9091": checkout listens on 8080`,
		},
		{
			name: "discovered port differs from compose", file: "deploy/prometheus/prometheus.yml",
			old: "port: 8081", new: "port: 9091",
			wantErr: `scrape target "worker:9091": worker listens on 8081`,
		},
		{
			name: "scaled worker behind a static target", file: "deploy/prometheus/prometheus.yml",
			old: "    dns_sd_configs:\n      - names: [\"worker\"]\n        type: A\n        port: 8081\n        refresh_interval: 5s", new: "    static_configs:\n      - targets: [\"worker:8081\"]",
			wantErr: `job "worker" scrapes a scalable service through a static target`,
		},
		{
			name: "scrape target is not a compose service", file: "deploy/prometheus/prometheus.yml",
			old: `targets: ["paymentsim:8082"]`, new: `targets: ["simulator:8082"]`,
			wantErr: `scrape target "simulator:8082": no such compose service`,
		},
		{
			name: "rules file not mounted", file: "deploy/prometheus/prometheus.yml",
			old: "/etc/prometheus/alerts.yml", new: "/etc/prometheus/rules.yml",
			wantErr: `rule file /etc/prometheus/rules.yml is not mounted`,
		},
		{
			name: "grafana outside the profile", file: "docker-compose.yml",
			old: "    image: grafana/grafana:11.6.0\n    profiles: [\"observability\"]\n", new: "    image: grafana/grafana:11.6.0\n",
			wantErr: `grafana: profiles [], want [observability]`,
		},
		{
			name: "datasource points elsewhere", file: "deploy/grafana/provisioning/datasources/prometheus.yml",
			old: "url: http://prometheus:9090", new: "url: http://localhost:9090",
			wantErr: `datasource url "http://localhost:9090", want http://prometheus:9090`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.CopyFS(filepath.Join(dir, "deploy"), os.DirFS("deploy")); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"docker-compose.yml", "Dockerfile"} {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(dir, f), string(b))
			}
			original, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(original), tt.old) {
				t.Fatalf("%s no longer contains the text this case edits:\n%s", tt.file, tt.old)
			}
			writeFile(t, filepath.Join(dir, tt.file), strings.Replace(string(original), tt.old, tt.new, 1))

			errs := checkObservability(loadCompose(t, filepath.Join(dir, "docker-compose.yml"), nil, observability))
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

// pinnedImage matches name:tag with a tag that names a release.
var pinnedImage = regexp.MustCompile(`^[a-z0-9./-]+:v?[0-9]+\.[0-9]+\.[0-9]+$`)

// checkObservability returns every rule the observability profile breaks:
// both services in the profile, pinned, healthy, published, mounting the
// deploy/ files that exist; Prometheus scraping exactly the application
// services on the ports compose gives them and loading mounted rule files;
// Grafana's datasource pointing at the prometheus service.
func checkObservability(p *types.Project) []error {
	var errs []error
	fail := func(service, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", service, fmt.Sprintf(format, args...)))
	}
	mounted := map[string]map[string]string{} // service → container path → host path
	for name, want := range observabilityServices {
		s, ok := p.Services[name]
		if !ok {
			fail(name, "service missing with --profile %s (or outside the profile)", observability)
			continue
		}
		if !slices.Equal(s.Profiles, []string{observability}) {
			fail(name, "profiles %v, want [%s]", s.Profiles, observability)
		}
		if !pinnedImage.MatchString(s.Image) {
			fail(name, "image %q is not pinned to a release", s.Image)
		}
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
			fail(name, "no healthcheck")
		}
		if !slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool {
			return pc.Published == want.port && fmt.Sprint(pc.Target) == want.port
		}) {
			fail(name, "port %s not published", want.port)
		}
		mounted[name] = map[string]string{}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				mounted[name][v.Target] = v.Source
			}
		}
		for target, src := range want.mounts {
			got, ok := mounted[name][target]
			switch {
			case !ok:
				fail(name, "%s not mounted at %s", src, target)
			case got != filepath.Join(p.WorkingDir, src):
				fail(name, "mounts %s at %s, want %s", got, target, src)
			}
			if _, err := os.Stat(filepath.Join(p.WorkingDir, src)); err != nil {
				fail(name, "mounted file: %v", err)
			}
		}
	}
	if _, ok := p.Services["grafana"].DependsOn["prometheus"]; !ok {
		fail("grafana", "does not depend on prometheus")
	}
	for _, app := range []string{"checkout", "worker"} {
		if v := p.Services[app].Environment["OTEL_EXPORTER_OTLP_ENDPOINT"]; v == nil || *v != "http://jaeger:4318" {
			fail(app, "does not export traces to jaeger's OTLP/HTTP port (OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4318)")
		}
	}

	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
			DNSSDConfigs []struct {
				Names []string `yaml:"names"`
				Type  string   `yaml:"type"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	promConfig := filepath.Join(p.WorkingDir, "deploy/prometheus/prometheus.yml")
	if err := readYAML(promConfig, &prom); err != nil {
		fail("prometheus", "%v", err)
	}
	var scraped []string
	for _, sc := range prom.ScrapeConfigs {
		// A DNS-discovered name is scraped at every address Docker's DNS
		// gives it: each replica of a scaled service.
		targets := slices.Clone(sc.StaticConfigs)
		for _, dc := range sc.DNSSDConfigs {
			if dc.Type != "A" {
				fail("prometheus", "job %q: dns_sd_configs type %q, want A (Docker's DNS has no SRV records)", sc.JobName, dc.Type)
			}
			for _, name := range dc.Names {
				targets = append(targets, struct {
					Targets []string `yaml:"targets"`
				}{[]string{fmt.Sprintf("%s:%d", name, dc.Port)}})
			}
		}
		if app, ok := appServices[sc.JobName]; ok && app.scalable && len(sc.DNSSDConfigs) == 0 {
			fail("prometheus", "job %q scrapes a scalable service through a static target: with --scale, each scrape reaches one replica at random", sc.JobName)
		}
		for _, st := range targets {
			for _, target := range st.Targets {
				host, port, _ := strings.Cut(target, ":")
				app, ok := appServices[host]
				switch {
				case !ok:
					fail("prometheus", "scrape target %q: no such compose service", target)
				case port != app.port:
					fail("prometheus", "scrape target %q: %s listens on %s", target, host, app.port)
				case sc.JobName != host:
					fail("prometheus", "job %q scrapes %s; name the job after the service (dashboards filter on job)", sc.JobName, host)
				}
				scraped = append(scraped, host)
			}
		}
	}
	slices.Sort(scraped)
	if want := slices.Sorted(maps.Keys(appServices)); !slices.Equal(scraped, want) {
		fail("prometheus", "scrapes %q, want each of %q once", scraped, want)
	}
	if len(prom.RuleFiles) == 0 {
		fail("prometheus", "loads no rule files")
	}
	for _, f := range prom.RuleFiles {
		if _, ok := mounted["prometheus"][f]; !ok {
			fail("prometheus", "rule file %s is not mounted", f)
		}
	}

	var datasources struct {
		Datasources []struct {
			Type, URL, UID string
		} `yaml:"datasources"`
	}
	if err := readYAML(filepath.Join(p.WorkingDir, "deploy/grafana/provisioning/datasources/prometheus.yml"), &datasources); err != nil {
		fail("grafana", "%v", err)
	}
	wantURL := "http://prometheus:" + observabilityServices["prometheus"].port
	for _, ds := range datasources.Datasources {
		if ds.URL != wantURL {
			fail("grafana", "datasource url %q, want %s", ds.URL, wantURL)
		}
	}
	if len(datasources.Datasources) != 1 {
		fail("grafana", "%d datasources provisioned, want 1", len(datasources.Datasources))
	}
	return errs
}

func readYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// fleet is the compose profile that runs checkout replicas behind a load
// balancer.
const fleet = "fleet"

// fleetReplicas is how many checkout replicas the fleet profile runs; the
// load balancer's configuration must expect as many.
const fleetReplicas = 3

func TestComposeFleetProfile(t *testing.T) {
	t.Parallel()
	project := loadCompose(t, "docker-compose.yml", nil, fleet)
	for _, err := range checkCompose(project) {
		t.Error(err)
	}
	for _, err := range checkFleet(project) {
		t.Error(err)
	}
}

func TestComposeFleetIsOptIn(t *testing.T) {
	t.Parallel()
	project := loadCompose(t, "docker-compose.yml", nil, observability)
	for _, name := range []string{"checkout-fleet", "lb"} {
		if _, ok := project.Services[name]; ok {
			t.Errorf("%s runs without --profile %s", name, fleet)
		}
		if _, ok := project.DisabledServices[name]; !ok {
			t.Errorf("%s: not defined in docker-compose.yml", name)
		}
	}
}

// TestComposeFleetCheckCatchesBreakage proves checkFleet can fail.
func TestComposeFleetCheckCatchesBreakage(t *testing.T) {
	t.Parallel()
	const cfg = "deploy/haproxy/haproxy.cfg"
	tests := []struct {
		name, file, old, new, wantErr string
	}{
		{
			name: "two replicas", file: "docker-compose.yml",
			old: "      replicas: 3\n", new: "      replicas: 2\n",
			wantErr: "checkout-fleet: 2 replicas, want 3",
		},
		{
			name: "replica without its environment", file: "docker-compose.yml",
			old: "    <<: *checkout-service\n    profiles: [\"fleet\"]\n", new: "    <<: *checkout-service\n    profiles: [\"fleet\"]\n    environment:\n      HTTP_ADDR: \":8080\"\n",
			wantErr: "checkout-fleet: environment differs from checkout's",
		},
		{
			name: "replicas publish a host port", file: "docker-compose.yml",
			old: "    deploy:\n      replicas: 3\n", new: "    deploy:\n      replicas: 3\n    ports:\n      - \"127.0.0.1:8090:8080\"\n",
			wantErr: "checkout-fleet: publishes host port 8090",
		},
		{
			name: "load balancer does not wait for the replicas", file: "docker-compose.yml",
			old: "      checkout-fleet:\n        condition: service_healthy\n", new: "      checkout-fleet:\n        condition: service_started\n",
			wantErr: "lb: depends on checkout-fleet with condition service_started, want service_healthy",
		},
		{
			name: "load balancer on another host port", file: "docker-compose.yml",
			old: "      - \"127.0.0.1:8080:8080\"\n    healthcheck:\n      test: [\"CMD\", \"wget\"", new: "      - \"127.0.0.1:8090:8080\"\n    healthcheck:\n      test: [\"CMD\", \"wget\"",
			wantErr: "lb: publishes [127.0.0.1:8090->8080], want 127.0.0.1:8080->8080",
		},
		{
			name: "load balancer config not mounted", file: "docker-compose.yml",
			old: "./deploy/haproxy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro", new: "./deploy/haproxy/haproxy.cfg:/etc/haproxy/haproxy.cfg:ro",
			wantErr: "lb: deploy/haproxy/haproxy.cfg not mounted at /usr/local/etc/haproxy/haproxy.cfg",
		},
		{
			name: "upstream is not the fleet", file: cfg,
			old: "server-template replica 3 checkout-fleet:8080 check", new: "server-template replica 3 checkout:8080 check",
			wantErr: `haproxy.cfg: server-template replica targets "checkout:8080", want checkout-fleet:8080`,
		},
		{
			name: "upstream port differs from checkout's", file: cfg,
			old: "server-template replica 3 checkout-fleet:8080 check", new: "server-template replica 3 checkout-fleet:8081 check",
			wantErr: `haproxy.cfg: server-template replica targets "checkout-fleet:8081", want checkout-fleet:8080`,
		},
		{
			name: "fewer upstream slots than replicas", file: cfg,
			old: "server-template replica 3 checkout-fleet:8080 check", new: "server-template replica 2 checkout-fleet:8080 check",
			wantErr: "haproxy.cfg: 2 checked server slots, want one per replica (3)",
		},
		{
			name: "replicas not health-checked", file: cfg,
			old: "server-template replica 3 checkout-fleet:8080 check", new: "server-template replica 3 checkout-fleet:8080",
			wantErr: "haproxy.cfg: 0 checked server slots",
		},
		{
			name: "health check on the liveness probe", file: cfg,
			old: "option httpchk GET /ready", new: "option httpchk GET /health",
			wantErr: `haproxy.cfg: health check "GET /health", want GET /ready`,
		},
		{
			name: "addresses resolved once at start", file: cfg,
			old: "default-server resolvers docker ", new: "default-server ",
			wantErr: "haproxy.cfg: servers do not re-resolve through Docker's DNS",
		},
		{
			name: "frontend on another port", file: cfg,
			old: "    bind :8080\n", new: "    bind :80\n",
			wantErr: `haproxy.cfg: frontend binds [":80"], want :8080`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.CopyFS(filepath.Join(dir, "deploy"), os.DirFS("deploy")); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"docker-compose.yml", "Dockerfile"} {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(dir, f), string(b))
			}
			original, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(original), tt.old) {
				t.Fatalf("%s no longer contains the text this case edits:\n%s", tt.file, tt.old)
			}
			writeFile(t, filepath.Join(dir, tt.file), strings.Replace(string(original), tt.old, tt.new, 1))

			errs := checkFleet(loadCompose(t, filepath.Join(dir, "docker-compose.yml"), nil, fleet))
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

// checkFleet returns every rule the fleet profile breaks: checkout-fleet
// runs fleetReplicas copies of the checkout service without host ports;
// the load balancer waits for them, takes checkout's place on
// 127.0.0.1:8080 and mounts its configuration, which sends requests to
// exactly those replicas, health-checked on /ready, re-resolving their
// addresses through Docker's DNS.
func checkFleet(p *types.Project) []error {
	var errs []error
	fail := func(service, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", service, fmt.Sprintf(format, args...)))
	}
	replicas, okR := p.Services["checkout-fleet"]
	lb, okLB := p.Services["lb"]
	single, okS := p.Services["checkout"]
	if !okR || !okLB || !okS {
		fail("fleet", "services checkout-fleet, lb and checkout must all exist with --profile %s", fleet)
		return errs
	}
	checkoutPort := appServices["checkout"].port

	for _, s := range []types.ServiceConfig{replicas, lb} {
		if !slices.Equal(s.Profiles, []string{fleet}) {
			fail(s.Name, "profiles %v, want [%s]", s.Profiles, fleet)
		}
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
			fail(s.Name, "no healthcheck")
		}
		if s.Restart == "" || s.Restart == "no" {
			fail(s.Name, "no restart policy")
		}
	}

	if replicas.Deploy == nil || replicas.Deploy.Replicas == nil || *replicas.Deploy.Replicas != fleetReplicas {
		got := 1
		if replicas.Deploy != nil && replicas.Deploy.Replicas != nil {
			got = *replicas.Deploy.Replicas
		}
		fail("checkout-fleet", "%d replicas, want %d", got, fleetReplicas)
	}
	if replicas.Build == nil || single.Build == nil || replicas.Build.Target != single.Build.Target {
		fail("checkout-fleet", "not built like checkout")
	}
	if !maps.EqualFunc(replicas.Environment, single.Environment, func(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }) {
		fail("checkout-fleet", "environment differs from checkout's")
	}
	if hc := replicas.HealthCheck; hc != nil && !strings.HasSuffix(strings.Join(hc.Test, " "), "checkout healthcheck") {
		fail("checkout-fleet", "healthcheck %q does not run `checkout healthcheck`", hc.Test)
	}
	requireDependency(replicas, "postgres", types.ServiceConditionHealthy, fail)
	requireDependency(replicas, "migrate", types.ServiceConditionCompletedSuccessfully, fail)
	for _, pc := range replicas.Ports {
		fail("checkout-fleet", "publishes host port %s; replicas are reached through lb", pc.Published)
	}

	if !strings.HasPrefix(lb.Image, "haproxy:") || !pinnedImage.MatchString(strings.TrimSuffix(lb.Image, "-alpine")) {
		fail("lb", "image %q, want a pinned haproxy release", lb.Image)
	}
	requireDependency(lb, "checkout-fleet", types.ServiceConditionHealthy, fail)
	// The load balancer takes the single checkout's address, so the
	// walkthrough's curl lines work against the fleet unchanged.
	var published []string
	for _, pc := range lb.Ports {
		published = append(published, fmt.Sprintf("%s:%s->%d", pc.HostIP, pc.Published, pc.Target))
	}
	if want := "127.0.0.1:" + checkoutPort + "->" + checkoutPort; !slices.Equal(published, []string{want}) {
		fail("lb", "publishes %v, want %s", published, want)
	}
	const cfgPath, cfgTarget = "deploy/haproxy/haproxy.cfg", "/usr/local/etc/haproxy/haproxy.cfg"
	if !slices.ContainsFunc(lb.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Type == types.VolumeTypeBind && v.Target == cfgTarget && v.Source == filepath.Join(p.WorkingDir, cfgPath)
	}) {
		fail("lb", "%s not mounted at %s", cfgPath, cfgTarget)
	}

	cfg, err := readHAProxy(filepath.Join(p.WorkingDir, cfgPath))
	if err != nil {
		fail("haproxy.cfg", "%v", err)
		return errs
	}
	if want := ":" + checkoutPort; !slices.Equal(cfg.binds, []string{want}) {
		fail("haproxy.cfg", "frontend binds %q, want %s", cfg.binds, want)
	}
	if cfg.check != "GET /ready" {
		fail("haproxy.cfg", "health check %q, want GET /ready (readiness: out of rotation, not restarted)", cfg.check)
	}
	if !cfg.resolves {
		fail("haproxy.cfg", "servers do not re-resolve through Docker's DNS (resolvers with nameserver 127.0.0.11:53 on default-server): a restarted replica's new address would never be used")
	}
	checked := 0
	want := "checkout-fleet:" + checkoutPort
	for _, st := range cfg.templates {
		if st.target != want {
			fail("haproxy.cfg", "server-template %s targets %q, want %s", st.prefix, st.target, want)
		}
		if st.checked && !st.backup {
			checked += st.count
		}
	}
	if checked != fleetReplicas {
		fail("haproxy.cfg", "%d checked server slots, want one per replica (%d)", checked, fleetReplicas)
	}
	return errs
}

// haproxyConfig is what checkFleet reads from haproxy.cfg.
type haproxyConfig struct {
	binds     []string // of every frontend but the container-local monitor
	check     string   // option httpchk's method and path
	resolves  bool     // default-server names a resolvers section that asks Docker's DNS
	templates []serverTemplate
}

type serverTemplate struct {
	prefix, target  string
	count           int
	checked, backup bool
}

// readHAProxy parses the few directives checkFleet needs: HAProxy's format
// is one directive a line, sections starting at column zero.
func readHAProxy(path string) (haproxyConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return haproxyConfig{}, err
	}
	var cfg haproxyConfig
	var section, name string
	dockerDNS := map[string]bool{} // resolvers section → has 127.0.0.11:53
	var defaultResolvers string
	for line := range strings.Lines(string(b)) {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			section, name = f[0], ""
			if len(f) > 1 {
				name = f[1]
			}
			continue
		}
		switch {
		case section == "frontend" && f[0] == "bind" && len(f) > 1 && !strings.HasPrefix(f[1], "127.0.0.1:"):
			cfg.binds = append(cfg.binds, f[1])
		case section == "resolvers" && f[0] == "nameserver" && len(f) > 2 && f[2] == "127.0.0.11:53":
			dockerDNS[name] = true
		case section == "backend" && f[0] == "option" && len(f) > 3 && f[1] == "httpchk":
			cfg.check = f[2] + " " + f[3]
		case section == "backend" && f[0] == "default-server":
			if i := slices.Index(f, "resolvers"); i >= 0 && i+1 < len(f) {
				defaultResolvers = f[i+1]
			}
		case section == "backend" && f[0] == "server-template" && len(f) > 3:
			var st serverTemplate
			st.prefix, st.target = f[1], f[3]
			if _, err := fmt.Sscan(f[2], &st.count); err != nil {
				return cfg, fmt.Errorf("server-template %s: count %q", f[1], f[2])
			}
			st.checked, st.backup = slices.Contains(f[4:], "check"), slices.Contains(f[4:], "backup")
			cfg.templates = append(cfg.templates, st)
		}
	}
	cfg.resolves = dockerDNS[defaultResolvers]
	return cfg, nil
}
