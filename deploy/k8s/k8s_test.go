// Package k8s holds no code, only the test that keeps the Kubernetes
// manifests in this directory true to the binaries. The test renders them
// with kustomize's own library (what `kubectl apply -k` runs), decodes every
// object strictly into the k8s.io/api types (an unknown or misspelt field
// fails), and checks the wiring against facts read from the code: the
// variables each binary reads, the paths it serves, its listen port, the
// Dockerfile's targets. networkpolicy_test.go checks the NetworkPolicies
// against the same objects: what each pod may reach and be reached by. No
// cluster is needed. The heavy dependencies
// (kustomize, k8s.io/api) are linked into this test binary only.
package k8s

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/resilientcheckout/checkout/internal/envconfig"
)

// repoRoot is the module root, seen from this directory.
const repoRoot = "../.."

// apps maps each Deployment that runs one of our binaries to the Dockerfile
// target of its container, and to the connections its process holds beyond
// its pool of DB_MAX_CONNS: one dedicated connection per LISTEN, given the
// process's settings (setting returns a variable's value, or the binary's
// default). The fleet breaker's coordinator (internal/fleet) listens in
// every process that shares the payment breaker — checkout in protected
// mode, the only one with a breaker, and the worker; River listens in the
// worker unless it only polls (behind PgBouncer).
var apps = map[string]struct {
	target  string
	listens func(setting func(string) string) int
}{
	"checkout": {target: "checkout", listens: func(setting func(string) string) int {
		return count(setting("FLEET_BREAKER") == "on" && setting("RESILIENCE_MODE") == "protected")
	}},
	"worker": {target: "worker", listens: func(setting func(string) string) int {
		return count(setting("FLEET_BREAKER") == "on") + count(setting("RIVER_POLL_ONLY") != "true")
	}},
	"paymentsim": {target: "paymentsim", listens: func(func(string) string) int { return 0 }},
}

func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// routeSources lists, per binary, the directories whose code registers its
// HTTP routes; a simulator's shared routes (/health, /metrics, the admin
// API) are registered in internal/sim/simulator.
var routeSources = map[string][]string{
	"checkout":   {"internal/api"},
	"worker":     {"internal/worker"},
	"paymentsim": {"internal/sim/paymentsim", "internal/sim/simulator"},
}

// commandSources lists, per binary, the files whose switch names its
// subcommands: a simulator's run skeleton is internal/sim/simulator's.
var commandSources = map[string][]string{
	"checkout":   {"cmd/checkout/main.go"},
	"worker":     {"cmd/worker/main.go"},
	"paymentsim": {"cmd/paymentsim/main.go", "internal/sim/simulator/command.go"},
}

// secretOnly are variables that must come from a Secret, never a ConfigMap
// or a literal: credentials.
var secretOnly = []string{"DATABASE_URL", "RIVERUI_USER", "RIVERUI_PASSWORD", "PAYMENTSIM_ADMIN_TOKEN", "STRIPE_SECRET_KEY"}

// credentials are the variables without which a binary exposes something
// that moves money or jobs (docs/design.md, "Invariants"); in a cluster, where the
// port is reachable from other pods (and from every pod where the network
// plugin ignores NetworkPolicy), they must be set.
var credentials = map[string][]string{
	"worker":     {"RIVERUI_USER", "RIVERUI_PASSWORD"},
	"paymentsim": {"PAYMENTSIM_ADMIN_TOKEN"},
}

func TestBase(t *testing.T) {
	t.Parallel()
	checkDir(t, "base", true)
}

func TestDemoOverlay(t *testing.T) {
	t.Parallel()
	checkDir(t, "overlays/demo", false)
}

func checkDir(t *testing.T, dir string, externalSecrets bool) {
	t.Helper()
	f := readFacts(t)
	m, errs := render(dir)
	if errs == nil {
		errs = check(m, f, externalSecrets)
	}
	for _, err := range errs {
		t.Error(err)
	}
}

// TestCodeFacts guards the parsing below: if the code changes shape and the
// parser finds nothing, the manifest checks would pass vacuously.
func TestCodeFacts(t *testing.T) {
	t.Parallel()
	f := readFacts(t)
	for name, want := range map[string][]string{
		"checkout":   {"HTTP_ADDR", "DATABASE_URL", "STRIPE_API_BASE", "SHUTDOWN_DRAIN_DELAY", "SHUTDOWN_TIMEOUT", "RESILIENCE_MODE", "BREAKER_WINDOW", "METRICS_ADDR", "CATALOG_URL"},
		"worker":     {"HTTP_ADDR", "DATABASE_URL", "STRIPE_API_BASE", "STRIPE_SECRET_KEY", "SHUTDOWN_DRAIN_DELAY", "RIVERUI_USER", "BREAKER_WINDOW"},
		"paymentsim": {"HTTP_ADDR", "SHUTDOWN_TIMEOUT", "PAYMENTSIM_ADMIN_TOKEN"},
	} {
		b := f.binaries[name]
		for _, v := range want {
			if _, ok := b.vars[v]; !ok {
				t.Errorf("%s: parsed variables %v lack %s", name, b.vars, v)
			}
		}
		if !slices.Contains(b.paths, "/health") {
			t.Errorf("%s: parsed paths %v lack /health", name, b.paths)
		}
		if !slices.Contains(b.commands, "serve") {
			t.Errorf("%s: parsed commands %v lack serve", name, b.commands)
		}
	}
	if _, ok := f.binaries["paymentsim"].vars["DATABASE_URL"]; ok {
		t.Error("paymentsim: parsed DATABASE_URL, which it does not read")
	}
	if got := f.binaries["checkout"].vars["HTTP_ADDR"]; got != ":8080" {
		t.Errorf("checkout: HTTP_ADDR default parsed as %q, want :8080", got)
	}
	if !slices.Contains(f.binaries["checkout"].commands, "migrate") || !slices.Contains(f.binaries["worker"].paths, "/ready") {
		t.Errorf("checkout commands %v, worker paths %v", f.binaries["checkout"].commands, f.binaries["worker"].paths)
	}
	if len(f.targets) < 3 {
		t.Errorf("Dockerfile targets %v", f.targets)
	}
}

// TestManifestCheckCatchesBreakage proves each check can fail: every case
// edits a copy of deploy/k8s the way a careless change would.
func TestManifestCheckCatchesBreakage(t *testing.T) {
	t.Parallel()
	const (
		checkoutYAML = "base/checkout.yaml"
		workerYAML   = "base/worker.yaml"
		checkoutEnv  = "base/checkout.env"
		workerEnv    = "base/worker.env"
		demo         = "overlays/demo/kustomization.yaml"
		paymentsim   = "overlays/demo/paymentsim.yaml"
		postgres     = "overlays/demo/postgres.yaml"
		policies     = "base/networkpolicy.yaml"
		demoEgress   = "overlays/demo/egress.yaml"
	)
	tests := []struct {
		name, file, old, new, wantErr string
		base                          bool // check the base, not the demo overlay
	}{
		{
			name: "misspelt field", file: checkoutYAML,
			old: "          readinessProbe:", new: "          readinesProbe:",
			wantErr: `unknown field "spec.template.spec.containers[0].readinesProbe"`,
		},
		{
			name: "liveness on /ready", file: workerYAML,
			old:     "          livenessProbe:\n            httpGet:\n              path: /health",
			new:     "          livenessProbe:\n            httpGet:\n              path: /ready",
			wantErr: "Deployment worker, container worker: livenessProbe GET /ready, want /health",
		},
		{
			name: "readiness path the binary does not serve", file: checkoutYAML,
			old: "              path: /ready", new: "              path: /readyz",
			wantErr: "container checkout: readinessProbe GET /readyz, want /ready",
		},
		{
			name: "startup probe removed", file: workerYAML,
			old:     "          startupProbe:\n            httpGet:\n              path: /health\n              port: http\n            periodSeconds: 1\n            failureThreshold: 30 # up to 30 s to come up\n",
			wantErr: "container worker: no startupProbe",
		},
		{
			name: "container port differs from HTTP_ADDR", file: checkoutYAML,
			old: "containerPort: 8080", new: "containerPort: 8090",
			wantErr: `container checkout: HTTP_ADDR ":8080" listens on 8080, container port "http" is 8090`,
		},
		{
			name: "variable the binary does not read", file: checkoutEnv,
			old: "SHUTDOWN_TIMEOUT=10s", new: "SHUTDOWN_TIMOUT=10s",
			wantErr: "container checkout: SHUTDOWN_TIMOUT is not read by the checkout binary",
		},
		{
			name: "variable whose default is localhost left unset", file: workerYAML, base: true,
			old:     "                name: worker-env\n          env:\n            - name: DATABASE_URL\n              valueFrom:\n                secretKeyRef:\n                  name: checkout-database\n                  key: DATABASE_URL\n",
			new:     "                name: worker-env\n          env:\n",
			wantErr: `container worker: DATABASE_URL not set (its default "postgres://checkout:checkout@localhost:5432/checkout?sslmode=disable" is the pod itself)`,
		},
		{
			name: "credential in a ConfigMap", file: workerEnv,
			old: "LOG_LEVEL=info", new: "LOG_LEVEL=info\nRIVERUI_PASSWORD=hunter2",
			wantErr: "container worker: RIVERUI_PASSWORD comes from ConfigMap worker-env-", // generated names end in a hash
		},
		{
			name: "River UI without credentials", file: workerYAML,
			old:     "            - name: RIVERUI_PASSWORD\n              valueFrom:\n                secretKeyRef:\n                  name: worker-riverui\n                  key: RIVERUI_PASSWORD\n",
			wantErr: "container worker: RIVERUI_PASSWORD not set: the binary would serve without a credential",
		},
		{
			name: "Secret lacks the key", file: demo,
			old:     "      - RIVERUI_PASSWORD=demo-riverui\n",
			wantErr: "has no key RIVERUI_PASSWORD (Deployment worker, container worker reads it)",
		},
		{
			name: "liveness-breaking resilience mode", file: checkoutEnv,
			old: "RESILIENCE_MODE=protected", new: "RESILIENCE_MODE=timeout",
			wantErr: `container checkout: RESILIENCE_MODE "timeout" serves /health from the API pool`,
		},
		{
			name: "STRIPE_API_BASE names no Service port", file: demo,
			old: "      - STRIPE_API_BASE=http://paymentsim:8082\n  - name: worker-env", new: "      - STRIPE_API_BASE=http://paymentsim:9082\n  - name: worker-env",
			wantErr: `container checkout: STRIPE_API_BASE host "paymentsim:9082": no Service paymentsim with port 9082`,
		},
		{
			name: "image that is not a Dockerfile target", file: workerYAML,
			old: "          image: worker", new: "          image: workr",
			wantErr: `container worker: image "workr" runs Dockerfile target "workr", want "worker"`,
		},
		{
			name: "subcommand the binary lacks", file: paymentsim,
			old: `args: ["serve"]`, new: `args: ["run"]`,
			wantErr: `container paymentsim: args [run]: the paymentsim binary has no command "run"`,
		},
		{
			name: "no migration before the worker", file: workerYAML,
			old: `args: ["migrate"]`, new: `args: ["serve"]`,
			wantErr: "Deployment worker: no init container runs `checkout migrate`",
		},
		{
			name: "PDB selects no pods", file: workerYAML,
			old:     "  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: worker",
			new:     "  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: wroker",
			wantErr: "PodDisruptionBudget worker: selects no pods",
		},
		{
			name: "PDB allows no disruption", file: checkoutYAML,
			old: "  maxUnavailable: 1\n", new: "  minAvailable: 3\n",
			wantErr: "PodDisruptionBudget checkout: allows no disruption of the 3 pods it selects",
		},
		{
			name: "Service selects no pods", file: checkoutYAML,
			old: "spec:\n  selector:\n    app.kubernetes.io/name: checkout", new: "spec:\n  selector:\n    app.kubernetes.io/name: checkuot",
			wantErr: "Service checkout: selects no pods",
		},
		{
			name: "Service targets a port no container has", file: workerYAML,
			old: "      targetPort: http", new: "      targetPort: web",
			wantErr: `Service worker: port 8081 targets "web", which the pods of Deployment worker do not expose`,
		},
		{
			name: "grace period shorter than the drain and shutdown", file: checkoutYAML,
			old: "terminationGracePeriodSeconds: 20", new: "terminationGracePeriodSeconds: 12",
			wantErr: "Deployment checkout: terminationGracePeriodSeconds 12s < SHUTDOWN_DRAIN_DELAY 5s + SHUTDOWN_TIMEOUT 10s",
		},
		{
			name: "readiness slower than the drain", file: checkoutYAML,
			old: "            periodSeconds: 2\n            timeoutSeconds: 2 # above the handler's own", new: "            periodSeconds: 5\n            timeoutSeconds: 2 # above the handler's own",
			wantErr: "container checkout: readinessProbe notices a drain after 10s (2 × 5s), longer than SHUTDOWN_DRAIN_DELAY 5s",
		},
		{
			name: "root filesystem writable", file: checkoutYAML,
			old: "readOnlyRootFilesystem: true", new: "readOnlyRootFilesystem: false",
			wantErr: "Deployment checkout, init container migrate: readOnlyRootFilesystem is not true",
		},
		{
			name: "privilege escalation allowed", file: postgres,
			old: "allowPrivilegeEscalation: false", new: "allowPrivilegeEscalation: true",
			wantErr: "StatefulSet postgres, container postgres: allowPrivilegeEscalation is not false",
		},
		{
			name: "capabilities kept", file: workerYAML,
			old: "            capabilities:\n              drop: [\"ALL\"]\n      topologySpreadConstraints:", new: "            capabilities:\n              drop: [\"NET_RAW\"]\n      topologySpreadConstraints:",
			wantErr: "Deployment worker, container worker: capabilities do not drop ALL",
		},
		{
			name: "root allowed", file: workerYAML,
			old: "        runAsNonRoot: true", new: "        runAsNonRoot: false",
			wantErr: "Deployment worker, container worker: runAsNonRoot is not true",
		},
		{
			name: "no numeric user for a named image user", file: paymentsim,
			old: "        runAsUser: 65532\n", new: "",
			wantErr: "Deployment paymentsim, container paymentsim: no runAsUser",
		},
		{
			name: "no memory limit", file: paymentsim,
			old: "            limits:\n              memory: 256Mi", new: "            limits: {}",
			wantErr: "Deployment paymentsim, container paymentsim: no memory limit",
		},
		{
			name: "topology spread over other pods", file: checkoutYAML,
			old:     "          topologyKey: kubernetes.io/hostname\n          whenUnsatisfiable: ScheduleAnyway\n          labelSelector:\n            matchLabels:\n              app.kubernetes.io/name: checkout",
			new:     "          topologyKey: kubernetes.io/hostname\n          whenUnsatisfiable: ScheduleAnyway\n          labelSelector:\n            matchLabels:\n              app.kubernetes.io/name: worker",
			wantErr: "Deployment checkout: topology spread constraint 2 selects other pods than its own",
		},
		{
			name: "Deployment selector misses its own pods", file: paymentsim,
			old: "    metadata:\n      labels:\n        app.kubernetes.io/name: paymentsim", new: "    metadata:\n      labels:\n        app.kubernetes.io/name: simulator",
			wantErr: "Deployment paymentsim: selector app.kubernetes.io/name=paymentsim does not match its pod template's labels",
		},
		{
			name: "migration against another database", file: workerYAML,
			old: "                  name: checkout-database", new: "                  name: worker-database",
			wantErr: "Deployment worker, init container migrate: migrates DATABASE_URL from Secret worker-database, the app uses Secret checkout-database-",
		},
		{
			name: "third-party image not pinned", file: postgres,
			old: "image: postgres:17-alpine", new: "image: postgres:latest",
			wantErr: `StatefulSet postgres, container postgres: image "postgres:latest" is not pinned to a release`,
		},
		{
			name: "no CPU request", file: workerYAML,
			old: "              cpu: 50m\n", new: "",
			wantErr: "Deployment worker, init container migrate: no CPU request",
		},
		{
			name: "root user", file: postgres,
			old: "runAsUser: 70 #", new: "runAsUser: 0 #",
			wantErr: "StatefulSet postgres, container postgres: runAsUser 0",
		},
		{
			name: "more replicas than Postgres has connections for", file: checkoutYAML,
			old: "  replicas: 3\n", new: "  replicas: 6\n",
			wantErr: "connections: up to 183 (replicas and surge × (DB_MAX_CONNS + each process's LISTEN connections)) > max_connections 150 - 3 reserved",
		},
		{
			// 113 without the fleet breaker's listeners, 120 with them.
			name: "the fleet breaker's LISTEN connections left out of the sum", file: postgres,
			old: "max_connections=150", new: "max_connections=120",
			wantErr: "connections: up to 120 (replicas and surge × (DB_MAX_CONNS + each process's LISTEN connections)) > max_connections 120 - 3 reserved",
		},
		{
			name: "no default deny", file: policies,
			old: "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n", new: "  podSelector: {}\n  policyTypes: [Ingress]\n",
			wantErr: "no default-deny NetworkPolicy",
		},
		{
			name: "workload no policy allows", file: paymentsim,
			old:     "  name: paymentsim\nspec:\n  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: paymentsim",
			new:     "  name: paymentsim\nspec:\n  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: simulator",
			wantErr: "Deployment paymentsim: no NetworkPolicy allows its pods any traffic",
		},
		{
			name: "policy selects no pods", file: policies,
			old:     "  name: checkout\nspec:\n  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: checkout",
			new:     "  name: checkout\nspec:\n  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: checkuot",
			wantErr: "NetworkPolicy checkout: selects no pods",
		},
		{
			name: "policy names a port the pods lack", file: policies,
			old: "        - port: metrics", new: "        - port: metric",
			wantErr: "NetworkPolicy checkout: ingress port metric is not a container port of Deployment checkout",
		},
		{
			name: "egress to a port the destination lacks", file: demoEgress,
			old: "          port: 8082", new: "          port: 8083",
			wantErr: "NetworkPolicy checkout: egress port 8083 is not a container port of Deployment paymentsim",
		},
		{
			name: "Service port no policy admits", file: policies,
			old: "    - ports:\n        - port: http\n", new: "",
			wantErr: "Service checkout: port 8080 reaches Deployment checkout port 8080, which no NetworkPolicy ingress rule admits",
		},
		{
			name: "no DNS", file: policies,
			old: "        values: [checkout, worker]", new: "        values: [checkout]",
			wantErr: "Deployment worker: no NetworkPolicy egress allows DNS",
		},
		{
			name: "no egress to the provider", file: demoEgress,
			old:     "    - to:\n        - podSelector:\n            matchLabels:\n              app.kubernetes.io/name: paymentsim\n      ports:\n        - protocol: TCP\n          port: 8082\n---",
			new:     "---",
			wantErr: "Deployment checkout: STRIPE_API_BASE paymentsim:8082: no NetworkPolicy egress from its pods allows Deployment paymentsim port 8082",
		},
		{
			name: "provider does not admit the worker", file: paymentsim,
			old: "                values: [checkout, worker]", new: "                values: [checkout]",
			wantErr: "Deployment worker: STRIPE_API_BASE paymentsim:8082: no NetworkPolicy ingress of Deployment paymentsim admits it on port 8082",
		},
		{
			name: "no egress to an external provider", file: policies, base: true,
			old: "          port: 443 # the provider's HTTPS API", new: "          port: 8443",
			wantErr: "Deployment checkout: STRIPE_API_BASE api.stripe.com: no NetworkPolicy egress allows port 443 outside the cluster",
		},
		{
			name: "database open to every pod of the namespace", file: postgres,
			old:     "        - podSelector:\n            matchExpressions:\n              - key: app.kubernetes.io/name\n                operator: In\n                values: [checkout, worker]\n      ports:\n        - port: postgres",
			new:     "        - podSelector: {}\n      ports:\n        - port: postgres",
			wantErr: "NetworkPolicy postgres: admits StatefulSet postgres port 5432 from podSelector <none>, want only the pods that use the database",
		},
		{
			name: "database open to every source", file: postgres,
			old:     "    - from:\n        - podSelector:\n            matchExpressions:\n              - key: app.kubernetes.io/name\n                operator: In\n                values: [checkout, worker]\n      ports:\n        - port: postgres",
			new:     "    - ports:\n        - port: postgres",
			wantErr: "NetworkPolicy postgres: admits StatefulSet postgres port 5432 from every source",
		},
		{
			name: "database open to a pod that does not use it", file: postgres,
			old: "values: [checkout, worker]", new: "values: [checkout, worker, paymentsim]",
			wantErr: "NetworkPolicy postgres: admits StatefulSet postgres port 5432 from Deployment paymentsim, which does not use the database",
		},
		{
			name: "metrics on the API port", file: checkoutEnv,
			old: "METRICS_ADDR=:8090\n", new: "",
			wantErr: "Deployment checkout: metrics port 8080 is admitted from every source (NetworkPolicy checkout), want only the monitoring namespace",
		},
		{
			name: "metrics port open to every source", file: policies,
			old:     "    - from:\n        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n      ports:\n        - port: metrics",
			new:     "    - ports:\n        - port: metrics",
			wantErr: "Deployment checkout: metrics port 8090 is admitted from every source",
		},
		{
			name: "metrics from another namespace", file: policies,
			old:     "              kubernetes.io/metadata.name: monitoring\n      ports:\n        - port: metrics",
			new:     "              kubernetes.io/metadata.name: default\n      ports:\n        - port: metrics",
			wantErr: "Deployment checkout: metrics port 8090 is not admitted from the monitoring namespace",
		},
		{
			name: "worker port open to every source", file: policies,
			old:     "    - from:\n        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n      ports:\n        - port: http",
			new:     "    - ports:\n        - port: http",
			wantErr: "Deployment worker: metrics port 8081 is admitted from every source",
		},
		{
			name: "scrape annotation on the wrong port", file: checkoutYAML,
			old: `prometheus.io/port: "8090"`, new: `prometheus.io/port: "8080"`,
			wantErr: `Deployment checkout: annotations prometheus.io/scrape "true", prometheus.io/port "8080": want "true" and 8090`,
		},
		{
			name: "METRICS_ADDR on a port the container does not expose", file: checkoutEnv,
			old: "METRICS_ADDR=:8090", new: "METRICS_ADDR=:8091",
			wantErr: `Deployment checkout: METRICS_ADDR ":8091" listens on 8091, which no container port exposes`,
		},
		{
			name: "scraped simulator not admitted from monitoring", file: paymentsim,
			old: "        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n", new: "",
			wantErr: "Deployment paymentsim: metrics port 8082 is not admitted from the monitoring namespace",
		},
	}
	f := readFacts(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(".")); err != nil {
				t.Fatal(err)
			}
			original, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(original), tt.old) {
				t.Fatalf("%s no longer contains the text this case edits:\n%s", tt.file, tt.old)
			}
			broken := strings.Replace(string(original), tt.old, tt.new, 1)
			if err := os.WriteFile(filepath.Join(dir, tt.file), []byte(broken), 0o600); err != nil {
				t.Fatal(err)
			}
			// The demo overlay includes the base, so it shows most breaks;
			// those the overlay papers over are checked on the base alone.
			m, errs := render(filepath.Join(dir, "overlays/demo"))
			if tt.base {
				m, errs = render(filepath.Join(dir, "base"))
			}
			if errs == nil {
				errs = check(m, f, tt.base)
			}
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

// manifests are the rendered objects, decoded.
type manifests struct {
	workloads  []workload
	services   []*corev1.Service
	pdbs       []*policyv1.PodDisruptionBudget
	policies   []*networkingv1.NetworkPolicy
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
}

// workload is a Deployment or StatefulSet, reduced to what the checks need.
type workload struct {
	kind, name string
	replicas   int32
	surge      int32 // extra pods during a rolling update
	pod        *corev1.PodTemplateSpec
	selector   labels.Selector
}

func (w workload) String() string { return w.kind + " " + w.name }

// render builds dir as `kubectl apply -k` would and decodes every object
// strictly.
func render(dir string) (*manifests, []error) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, []error{fmt.Errorf("kustomize build %s: %w", dir, err)}
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, []error{err}
		}
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	var errs []error
	for _, r := range resources.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.CurId(), err))
			continue
		}
		obj, _, err := decoder.Decode(b, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", r.GetKind(), r.GetName(), err))
			continue
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			var surge int32
			if ru := o.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil && o.Spec.Replicas != nil {
				surge = scaled(*ru.MaxSurge, *o.Spec.Replicas, true)
			}
			errs = append(errs, m.addWorkload("Deployment", o.Name, o.Spec.Replicas, surge, &o.Spec.Template, o.Spec.Selector)...)
		case *appsv1.StatefulSet:
			errs = append(errs, m.addWorkload("StatefulSet", o.Name, o.Spec.Replicas, 0, &o.Spec.Template, o.Spec.Selector)...)
		case *corev1.Service:
			m.services = append(m.services, o)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, o)
		case *networkingv1.NetworkPolicy:
			m.policies = append(m.policies, o)
		case *corev1.ConfigMap:
			m.configMaps[o.Name] = o
		case *corev1.Secret:
			m.secrets[o.Name] = o
		case *corev1.Namespace:
		default:
			errs = append(errs, fmt.Errorf("%s %s: a kind these checks do not cover", r.GetKind(), r.GetName()))
		}
	}
	return m, errs
}

func (m *manifests) addWorkload(kind, name string, replicas *int32, surge int32, pod *corev1.PodTemplateSpec, sel *metav1.LabelSelector) []error {
	selector, err := labelSelector(sel)
	if err != nil {
		return []error{fmt.Errorf("%s %s: selector: %w", kind, name, err)}
	}
	n := int32(1)
	if replicas != nil {
		n = *replicas
	}
	m.workloads = append(m.workloads, workload{kind: kind, name: name, replicas: n, surge: surge, pod: pod, selector: selector})
	return nil
}

// facts are what the code says the manifests must match.
type facts struct {
	binaries map[string]*binary
	targets  []string // Dockerfile stages
}

type binary struct {
	name     string
	vars     map[string]string // variable → its default when a string literal, else ""
	paths    []string          // GET routes it serves
	commands []string          // its subcommands (serve, migrate, …)
}

func (b *binary) reads(v string) bool { _, ok := b.vars[v]; return ok }

func readFacts(t *testing.T) *facts {
	t.Helper()
	f, err := loadFacts(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

var (
	fromAs      = regexp.MustCompile(`(?im)^FROM\s+\S+\s+AS\s+(\S+)\s*$`)
	getRoute    = regexp.MustCompile(`http\.MethodGet,\s*"(/[^"]*)"|"GET (/[^"]*)"`)
	commandCase = regexp.MustCompile(`case "([a-z-]+)":`)
	readerTypes = []string{"String", "Int", "Float", "Duration", "OneOf", "URL", "Addr"}
	// optionalReaders read a variable that is off when unset: no default.
	optionalReaders = []string{"OptionalAddr", "OptionalURL"}
)

func loadFacts(root string) (*facts, error) {
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	f := &facts{binaries: map[string]*binary{}}
	for _, m := range fromAs.FindAllStringSubmatch(string(dockerfile), -1) {
		f.targets = append(f.targets, m[1])
	}

	// Variables several binaries share are read by envconfig's helpers
	// (env.Database, env.Resilience, env.Mode), some through another helper
	// (env.Payment through r.secretKey): one level of that is followed.
	helpers := map[string]map[string]string{}
	bodies := map[string]*ast.BlockStmt{}
	envconfigFiles, err := filepath.Glob(filepath.Join(root, "internal/envconfig/*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	for _, path := range envconfigFiles {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil, err
		}
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv != nil {
				helpers[fn.Name.Name] = envReads(fn.Body, "r", nil)
				bodies[fn.Name.Name] = fn.Body
			}
		}
	}
	direct := maps.Clone(helpers)
	for name, body := range bodies {
		helpers[name] = envReads(body, "r", direct)
	}

	for name, routes := range routeSources {
		b := &binary{name: name}
		file, err := parser.ParseFile(fset, filepath.Join(root, "cmd", name, "config.go"), nil, 0)
		if err != nil {
			return nil, err
		}
		b.vars = envReads(file, "env", helpers)
		for _, path := range commandSources[name] {
			main, err := os.ReadFile(filepath.Join(root, path))
			if err != nil {
				return nil, err
			}
			for _, m := range commandCase.FindAllStringSubmatch(string(main), -1) {
				b.commands = append(b.commands, m[1])
			}
		}
		var sources []string
		for _, dir := range routes {
			paths, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
			if err != nil {
				return nil, err
			}
			sources = append(sources, paths...)
		}
		for _, path := range sources {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			for _, m := range getRoute.FindAllStringSubmatch(string(src), -1) {
				b.paths = append(b.paths, m[1]+m[2])
			}
		}
		f.binaries[name] = b
	}
	return f, nil
}

// envReads collects the variables read in node through receiver recv
// (env.Duration("SHUTDOWN_TIMEOUT", …)), with their literal defaults, and
// those of the helpers it calls (env.Database(…)).
func envReads(node ast.Node, recv string, helpers map[string]map[string]string) map[string]string {
	vars := map[string]string{}
	ast.Inspect(node, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != recv {
			return true
		}
		if slices.Contains(optionalReaders, sel.Sel.Name) && len(call.Args) > 0 {
			if name, ok := stringLit(call.Args[0]); ok {
				vars[name] = ""
			}
			return true
		}
		if !slices.Contains(readerTypes, sel.Sel.Name) {
			for k, v := range helpers[sel.Sel.Name] {
				vars[k] = v
			}
			return true
		}
		if len(call.Args) < 2 {
			return true
		}
		name, ok := stringLit(call.Args[0])
		if !ok {
			return true
		}
		vars[name], _ = stringLit(call.Args[1])
		return true
	})
	return vars
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// requiredInCluster reports why a binary's variable must be set in a
// cluster: its default points at localhost, which in a pod is the pod.
func requiredInCluster(b *binary, v string) (string, bool) {
	def := b.vars[v]
	if v == "DATABASE_URL" {
		def = envconfig.DefaultDatabaseURL
	}
	return def, strings.Contains(def, "localhost")
}

// envValue is one variable as a container sees it.
type envValue struct {
	value  string // "" when it comes from a Secret that is not rendered
	source string // "ConfigMap x", "Secret x", "a literal"
}

// checker accumulates errors.
type checker struct {
	m               *manifests
	f               *facts
	externalSecrets bool // base: Secrets are provided outside these files
	errs            []error
}

func (c *checker) fail(where fmt.Stringer, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
}

type place string

func (p place) String() string { return string(p) }

// check returns every rule the rendered manifests break.
func check(m *manifests, f *facts, externalSecrets bool) []error {
	c := &checker{m: m, f: f, externalSecrets: externalSecrets}
	seen := map[string]bool{}
	for _, w := range m.workloads {
		c.checkPod(w)
		if app, ok := apps[w.name]; ok && w.kind == "Deployment" {
			seen[w.name] = true
			c.checkApp(w, f.binaries[app.target])
		}
	}
	for _, name := range []string{"checkout", "worker"} {
		if !seen[name] {
			c.fail(place("Deployment "+name), "missing")
		}
	}
	c.checkServices()
	c.checkPDBs()
	c.checkConnections()
	c.checkNetworkPolicies()
	return c.errs
}

// checkPod applies the rules every pod meets: hardened security context,
// resources.
func (c *checker) checkPod(w workload) {
	spec := w.pod.Spec
	if !w.selector.Matches(labels.Set(w.pod.Labels)) {
		c.fail(w, "selector %s does not match its pod template's labels", w.selector)
	}
	podSC := spec.SecurityContext
	if podSC == nil {
		podSC = &corev1.PodSecurityContext{}
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for i, ctr := range all {
		kind := "container"
		if i < len(spec.InitContainers) {
			kind = "init container"
		}
		where := place(fmt.Sprintf("%s, %s %s", w, kind, ctr.Name))
		sc := ctr.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if nonRoot := cmp(sc.RunAsNonRoot, podSC.RunAsNonRoot); nonRoot == nil || !*nonRoot {
			c.fail(where, "runAsNonRoot is not true")
		}
		// The distroless image names its user; the kubelet can enforce
		// runAsNonRoot only with a numeric uid.
		if uid := cmp(sc.RunAsUser, podSC.RunAsUser); uid == nil {
			c.fail(where, "no runAsUser")
		} else if *uid == 0 {
			c.fail(where, "runAsUser 0")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			c.fail(where, "allowPrivilegeEscalation is not false")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			c.fail(where, "readOnlyRootFilesystem is not true")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			c.fail(where, "capabilities do not drop ALL")
		}
		if sc.Privileged != nil && *sc.Privileged {
			c.fail(where, "privileged")
		}
		if _, ok := ctr.Resources.Requests[corev1.ResourceCPU]; !ok {
			c.fail(where, "no CPU request")
		}
		if _, ok := ctr.Resources.Requests[corev1.ResourceMemory]; !ok {
			c.fail(where, "no memory request")
		}
		if _, ok := ctr.Resources.Limits[corev1.ResourceMemory]; !ok {
			c.fail(where, "no memory limit")
		}
		if _, tag := imageTarget(ctr.Image); tag == "" || tag == "latest" {
			if _, ours := c.f.binaries[target(ctr.Image)]; !ours {
				c.fail(where, "image %q is not pinned to a release", ctr.Image)
			}
		}
	}
	if w.replicas > 1 {
		if len(spec.TopologySpreadConstraints) == 0 {
			c.fail(w, "%d replicas without topology spread constraints", w.replicas)
		}
		for i, tsc := range spec.TopologySpreadConstraints {
			sel, err := labelSelector(tsc.LabelSelector)
			if err != nil || !sel.Matches(labels.Set(w.pod.Labels)) {
				c.fail(w, "topology spread constraint %d selects other pods than its own", i+1)
			}
		}
	}
}

func cmp[T any](container, pod *T) *T {
	if container != nil {
		return container
	}
	return pod
}

// checkApp checks a Deployment running one of our binaries against its
// code.
func (c *checker) checkApp(w workload, b *binary) {
	spec := w.pod.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Name != w.name {
		c.fail(w, "want one container named %s", w.name)
		return
	}
	ctr := spec.Containers[0]
	where := place(fmt.Sprintf("%s, container %s", w, ctr.Name))
	if got := target(ctr.Image); got != b.name {
		c.fail(where, "image %q runs Dockerfile target %q, want %q", ctr.Image, got, b.name)
	}
	env := c.checkBinaryContainer(where, ctr, b)

	// The port the binary listens on, from HTTP_ADDR or its default.
	addr, ok := env["HTTP_ADDR"]
	if !ok {
		addr = envValue{value: b.vars["HTTP_ADDR"], source: "the default"}
	}
	_, port, err := net.SplitHostPort(addr.value)
	if err != nil {
		c.fail(where, "HTTP_ADDR %q: %v", addr.value, err)
	}
	var httpPort *corev1.ContainerPort
	for i, p := range ctr.Ports {
		if p.Name == "http" {
			httpPort = &ctr.Ports[i]
		}
	}
	switch {
	case httpPort == nil:
		c.fail(where, `no container port named "http"`)
	case strconv.Itoa(int(httpPort.ContainerPort)) != port:
		c.fail(where, "HTTP_ADDR %q listens on %s, container port %q is %d", addr.value, port, httpPort.Name, httpPort.ContainerPort)
	}

	// Probes: liveness and startup on /health, which touches nothing;
	// readiness on /ready where the binary has one.
	readiness := "/health"
	if slices.Contains(b.paths, "/ready") {
		readiness = "/ready"
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		want  string
	}{
		{"startupProbe", ctr.StartupProbe, "/health"},
		{"livenessProbe", ctr.LivenessProbe, "/health"},
		{"readinessProbe", ctr.ReadinessProbe, readiness},
	} {
		if p.probe == nil {
			c.fail(where, "no %s", p.name)
			continue
		}
		get := p.probe.HTTPGet
		if get == nil {
			c.fail(where, "%s is not an HTTP GET", p.name)
			continue
		}
		if get.Path != p.want {
			c.fail(where, "%s GET %s, want %s", p.name, get.Path, p.want)
		}
		if !slices.Contains(b.paths, get.Path) {
			c.fail(where, "%s GET %s: the %s binary serves no such path (it serves %v)", p.name, get.Path, b.name, b.paths)
		}
		if httpPort != nil && !portMatches(get.Port, *httpPort) {
			c.fail(where, "%s port %s is not the HTTP port %d", p.name, get.Port.String(), httpPort.ContainerPort)
		}
	}

	// Shutdown: the grace period covers the drain and the shutdown
	// timeout, and a load balancer following readiness notices the drain
	// before it ends.
	var drain, need time.Duration
	var budget []string
	for _, v := range []string{"SHUTDOWN_DRAIN_DELAY", "SHUTDOWN_TIMEOUT"} {
		if !b.reads(v) {
			continue
		}
		d, err := time.ParseDuration(env[v].value)
		if err != nil {
			c.fail(where, "%s must be set explicitly (%q): the grace period is sized from it", v, env[v].value)
			continue
		}
		if v == "SHUTDOWN_DRAIN_DELAY" {
			drain = d
		}
		need += d
		budget = append(budget, fmt.Sprintf("%s %v", v, d))
	}
	grace := 30 * time.Second // Kubernetes' default
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if grace < need {
		c.fail(w, "terminationGracePeriodSeconds %v < %s", grace, strings.Join(budget, " + "))
	}
	if rp := ctr.ReadinessProbe; drain > 0 && rp != nil {
		period, threshold := orDefault(rp.PeriodSeconds, 10), orDefault(rp.FailureThreshold, 3)
		if notice := time.Duration(period*threshold) * time.Second; notice > drain {
			c.fail(where, "readinessProbe notices a drain after %v (%d × %ds), longer than SHUTDOWN_DRAIN_DELAY %v", notice, threshold, period, drain)
		}
	}

	// In any mode but protected, /health shares the API pool: a provider
	// outage that saturates it fails liveness and restarts every pod.
	if b.reads("RESILIENCE_MODE") {
		if mode := env["RESILIENCE_MODE"].value; mode != "" && mode != "protected" {
			c.fail(where, "RESILIENCE_MODE %q serves /health from the API pool: a provider outage would fail liveness", mode)
		}
	}

	// The schema must be in place before the binary starts: an init
	// container runs `checkout migrate` against the same database.
	if b.reads("DATABASE_URL") {
		c.checkMigration(w, env["DATABASE_URL"])
	}
}

func orDefault(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

// checkBinaryContainer checks the environment and arguments of a container
// running binary b and returns its environment.
func (c *checker) checkBinaryContainer(where place, ctr corev1.Container, b *binary) map[string]envValue {
	if len(ctr.Command) > 0 {
		c.fail(where, "command %v overrides the image's entrypoint", ctr.Command)
	}
	if len(ctr.Args) > 0 && !slices.Contains(b.commands, ctr.Args[0]) {
		c.fail(where, "args %v: the %s binary has no command %q", ctr.Args, b.name, ctr.Args[0])
	}
	env := c.environment(where, ctr)
	for _, from := range ctr.EnvFrom {
		if from.ConfigMapRef == nil {
			continue
		}
		cm, ok := c.m.configMaps[from.ConfigMapRef.Name]
		if !ok {
			continue // environment reported it
		}
		for k := range cm.Data {
			if slices.Contains(secretOnly, from.Prefix+k) {
				c.fail(where, "%s comes from ConfigMap %s, want a Secret", from.Prefix+k, from.ConfigMapRef.Name)
			}
		}
	}
	for name, v := range env {
		if !b.reads(name) {
			c.fail(where, "%s is not read by the %s binary", name, b.name)
		}
		if slices.Contains(secretOnly, name) && !strings.HasPrefix(v.source, "Secret ") && !strings.HasPrefix(v.source, "ConfigMap ") {
			c.fail(where, "%s comes from %s, want a Secret", name, v.source)
		}
	}
	for name := range b.vars {
		if _, ok := env[name]; ok {
			continue
		}
		if def, required := requiredInCluster(b, name); required {
			c.fail(where, "%s not set (its default %q is the pod itself)", name, def)
		}
	}
	for _, name := range credentials[b.name] {
		if _, ok := env[name]; !ok {
			c.fail(where, "%s not set: the binary would serve without a credential", name)
		}
	}
	for _, name := range []string{"STRIPE_API_BASE", "DATABASE_URL"} {
		if v, ok := env[name]; ok && v.value != "" {
			c.checkURL(where, name, v.value)
		}
	}
	return env
}

// environment resolves a container's variables as the kubelet would: env
// entries over envFrom sources.
func (c *checker) environment(where place, ctr corev1.Container) map[string]envValue {
	env := map[string]envValue{}
	for _, from := range ctr.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := c.m.configMaps[from.ConfigMapRef.Name]
			if !ok {
				c.fail(where, "ConfigMap %s not found", from.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = envValue{value: v, source: "ConfigMap " + cm.Name}
			}
		case from.SecretRef != nil:
			s, ok := c.m.secrets[from.SecretRef.Name]
			if !ok {
				c.fail(where, "envFrom Secret %s: its keys cannot be checked; name them in env", from.SecretRef.Name)
				continue
			}
			for k, v := range s.Data {
				env[from.Prefix+k] = envValue{value: string(v), source: "Secret " + s.Name}
			}
		}
	}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envValue{value: e.Value, source: "a literal"}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v := envValue{source: "Secret " + ref.Name}
			s, ok := c.m.secrets[ref.Name]
			switch {
			case ok:
				b, has := s.Data[ref.Key]
				if !has {
					c.fail(place("Secret "+ref.Name), "has no key %s (%s reads it)", ref.Key, where)
				}
				v.value = string(b)
			case !c.externalSecrets:
				c.fail(where, "%s: Secret %s not found", e.Name, ref.Name)
			}
			env[e.Name] = v
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := c.m.configMaps[ref.Name]
			if !ok {
				c.fail(where, "%s: ConfigMap %s not found", e.Name, ref.Name)
			}
			env[e.Name] = envValue{value: cm.Data[ref.Key], source: "ConfigMap " + ref.Name}
		default:
			env[e.Name] = envValue{source: "the downward API"}
		}
	}
	return env
}

// checkURL checks that a URL naming a host inside the cluster (no dot in
// its name) names a rendered Service and one of its ports.
func (c *checker) checkURL(where place, name, raw string) {
	u, err := url.Parse(raw)
	if err != nil {
		c.fail(where, "%s does not parse", name)
		return
	}
	host, port := u.Hostname(), u.Port()
	if strings.Contains(host, ".") || host == "" {
		return // outside the cluster, or a fully qualified name
	}
	if port == "" {
		port = map[string]string{"http": "80", "https": "443", "postgres": "5432", "postgresql": "5432"}[u.Scheme]
	}
	for _, s := range c.m.services {
		if s.Name != host {
			continue
		}
		for _, p := range s.Spec.Ports {
			if strconv.Itoa(int(p.Port)) == port {
				return
			}
		}
	}
	c.fail(where, "%s host %q: no Service %s with port %s", name, u.Host, host, port)
}

// checkMigration requires an init container of w to run `checkout migrate`
// on the database the app uses.
func (c *checker) checkMigration(w workload, appDB envValue) {
	for _, ctr := range w.pod.Spec.InitContainers {
		if target(ctr.Image) != "checkout" || len(ctr.Args) == 0 || ctr.Args[0] != "migrate" {
			continue
		}
		where := place(fmt.Sprintf("%s, init container %s", w, ctr.Name))
		env := c.checkBinaryContainer(where, ctr, c.f.binaries["checkout"])
		if db := env["DATABASE_URL"]; db != appDB {
			c.fail(where, "migrates DATABASE_URL from %s, the app uses %s", db.source, appDB.source)
		}
		return
	}
	c.fail(w, "no init container runs `checkout migrate`: the app would start before its schema exists")
}

// checkServices requires every Service to select pods and to target a port
// they expose.
func (c *checker) checkServices() {
	for _, s := range c.m.services {
		where := place("Service " + s.Name)
		pods := c.selected(labels.SelectorFromSet(s.Spec.Selector))
		if len(s.Spec.Selector) == 0 || len(pods) == 0 {
			c.fail(where, "selects no pods")
			continue
		}
		for _, p := range s.Spec.Ports {
			for _, w := range pods {
				if !slices.ContainsFunc(w.pod.Spec.Containers, func(ctr corev1.Container) bool {
					return slices.ContainsFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return portMatches(p.TargetPort, cp) })
				}) {
					c.fail(where, "port %d targets %q, which the pods of %s do not expose", p.Port, p.TargetPort.String(), w)
				}
			}
		}
	}
}

// checkPDBs requires every PodDisruptionBudget to select pods and to let a
// drain evict at least one of them.
func (c *checker) checkPDBs() {
	for _, pdb := range c.m.pdbs {
		where := place("PodDisruptionBudget " + pdb.Name)
		sel, err := labelSelector(pdb.Spec.Selector)
		if err != nil {
			c.fail(where, "selector: %v", err)
			continue
		}
		pods := c.selected(sel)
		if len(pods) == 0 {
			c.fail(where, "selects no pods")
			continue
		}
		var replicas int32
		for _, w := range pods {
			replicas += w.replicas
		}
		allowed := int32(0)
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			allowed = scaled(*pdb.Spec.MaxUnavailable, replicas, false)
		case pdb.Spec.MinAvailable != nil:
			allowed = replicas - scaled(*pdb.Spec.MinAvailable, replicas, true)
		}
		if allowed < 1 {
			c.fail(where, "allows no disruption of the %d pods it selects: node drains would hang", replicas)
		}
	}
}

// scaled resolves an int-or-percent against n, rounding as the disruption
// controller does (up for minAvailable, down for maxUnavailable).
func scaled(v intstr.IntOrString, n int32, roundUp bool) int32 {
	got, err := intstr.GetScaledValueFromIntOrPercent(&v, int(n), roundUp)
	if err != nil {
		return 0
	}
	return int32(got)
}

// checkConnections adds up the database connections the Deployments may
// hold at once, during a rolling update, against a rendered PostgreSQL's
// max_connections (the demo's; the base's database is external).
func (c *checker) checkConnections() {
	var maxConns int
	for _, w := range c.m.workloads {
		for _, ctr := range w.pod.Spec.Containers {
			for i, a := range ctr.Args {
				if v, ok := strings.CutPrefix(a, "max_connections="); ok && i > 0 && ctr.Args[i-1] == "-c" {
					maxConns, _ = strconv.Atoi(v)
				}
			}
		}
	}
	if maxConns == 0 {
		return
	}
	total := 0
	for _, w := range c.m.workloads {
		app, ok := apps[w.name]
		if !ok || !c.f.binaries[app.target].reads("DB_MAX_CONNS") {
			continue
		}
		// Resolved again without reporting: checkApp has reported its errors.
		quiet := &checker{m: c.m, f: c.f, externalSecrets: true}
		env := quiet.environment(place(w.String()), w.pod.Spec.Containers[0])
		n, err := strconv.Atoi(env["DB_MAX_CONNS"].value)
		if err != nil {
			c.fail(w, "DB_MAX_CONNS must be set explicitly to count connections (%q)", env["DB_MAX_CONNS"].value)
			continue
		}
		bin := c.f.binaries[app.target]
		setting := func(name string) string {
			if v, ok := env[name]; ok {
				return v.value
			}
			return bin.vars[name]
		}
		total += int(w.replicas+w.surge) * (n + app.listens(setting))
	}
	const reserved = 3 // superuser_reserved_connections' default
	if total > maxConns-reserved {
		c.errs = append(c.errs, fmt.Errorf("connections: up to %d (replicas and surge × (DB_MAX_CONNS + each process's LISTEN connections)) > max_connections %d - %d reserved", total, maxConns, reserved))
	}
}

func (c *checker) selected(sel labels.Selector) []workload {
	var ws []workload
	for _, w := range c.m.workloads {
		if sel.Matches(labels.Set(w.pod.Labels)) {
			ws = append(ws, w)
		}
	}
	return ws
}

func portMatches(p intstr.IntOrString, cp corev1.ContainerPort) bool {
	if p.Type == intstr.String {
		return p.StrVal == cp.Name
	}
	return p.IntVal == cp.ContainerPort
}

// imageTarget splits an image reference into its last path element (the
// Dockerfile target, by this repository's naming) and its tag.
func imageTarget(image string) (name, tag string) {
	image, _, _ = strings.Cut(image, "@")
	name = image[strings.LastIndex(image, "/")+1:]
	name, tag, _ = strings.Cut(name, ":")
	return name, tag
}

func target(image string) string {
	name, _ := imageTarget(image)
	return name
}

func labelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, errors.New("no selector")
	}
	return metav1.LabelSelectorAsSelector(s)
}
