package checkout_test

// These tests load docker-compose.yml with compose-go, the loader docker
// compose itself uses, and check the wiring the demo depends on. No Docker
// engine is needed, so they run everywhere `make test` runs.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"
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
			old: `targets: ["worker:8081"]`, new: `targets: ["worker:9091"]`,
			wantErr: `scrape target "worker:9091": worker listens on 8081`,
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
		} `yaml:"scrape_configs"`
	}
	promConfig := filepath.Join(p.WorkingDir, "deploy/prometheus/prometheus.yml")
	if err := readYAML(promConfig, &prom); err != nil {
		fail("prometheus", "%v", err)
	}
	var scraped []string
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
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
