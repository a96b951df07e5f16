// Package telemetrytest keeps the dashboard and alert rules of deploy/
// honest: it extracts the metric names their PromQL queries use, and the
// policy and pool names they select (resilience_breaker_state{name="catalog"}), and each
// binary's tests check that the binary, running for real, exports the names
// it owns with those policies and pools. A metric renamed in code (or a typo
// in a query, or a panel for a policy the process does not run) then fails a
// test instead of drawing an empty panel or an alert that can never fire.
package telemetrytest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v4"
)

// Files of deploy/ whose queries are checked, relative to the module root.
const (
	DashboardFile = "deploy/grafana/dashboards/checkout.json"
	AlertsFile    = "deploy/prometheus/alerts.yml"
)

// Owners says which binary's test must find each metric the dashboard and
// the alerts use. A metric several binaries export (resilience_* come from
// checkout and worker) is checked where the test can produce every series
// the queries need. A query using a metric missing here fails
// TestEveryQueriedMetricHasAnOwner: add it to the binary that exports it.
var Owners = map[string][]string{
	"checkout": {
		"catalog_cache_lookups_total",
		"catalog_cache_entries",
		"catalog_cache_stale_age_seconds",
		"catalog_requests_total",
		"catalog_requests_coalesced_total",
		"catalog_call_duration_seconds",
		"resilience_breaker_state",
		"resilience_breaker_transitions_total",
		"resilience_breaker_source",
		"resilience_fleet_connected",
		"resilience_calls_total",
		"resilience_concurrency_limit",
		"resilience_bulkhead_in_use",
		"resilience_rejected_total",
		"resilience_retry_attempts_total",
		"resilience_retry_backoff_seconds",
		"http_pool_in_use",
		"http_pool_rejected_total",
		"http_request_duration_seconds",
		"checkout_orders_total",
	},
	"worker": {
		"checkout_charge_jobs_total",
		"checkout_orders_failed_total",
		"checkout_unsettled_orders",
		"checkout_unsettled_order_oldest_age_seconds",
		"checkout_backlog_query_failed",
		"checkout_orders_requeued_total",
		"checkout_ledger_findings_total",
	},
	"paymentsim": {
		"paymentsim_charge_requests_total",
		"paymentsim_charge_requests_in_flight",
		"paymentsim_charge_requests_in_flight_max",
		"paymentsim_charge_duration_seconds",
	},
	"catalogsim": {
		"catalogsim_price_requests_total",
		"catalogsim_price_requests_in_flight",
		"catalogsim_price_duration_seconds",
	},
}

// PrometheusSeries are written by Prometheus itself for every target, not
// exported by any binary.
var PrometheusSeries = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}

// CheckedLabels are the labels whose selected values CheckExported checks:
// those naming a part of the process built at start — a resilience policy
// (name="catalog"), an HTTP pool (pool="api") — whose series exist from the
// first scrape, so a panel for a policy the process does not run fails. Event
// labels (reason, outcome, status, source) get a series only once the event
// has happened, which a test cannot always cause: their values stay unchecked.
var CheckedLabels = []string{"name", "pool"}

// Root returns the module root, found by walking up to go.mod from the
// test's working directory (its package directory).
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("telemetrytest: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Dashboard is the part of a Grafana dashboard JSON the checks read.
type Dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is a dashboard panel; rows nest panels.
type Panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// LoadDashboard parses the dashboard file; unknown fields are allowed, as
// Grafana's model has hundreds.
func LoadDashboard(t testing.TB, path string) Dashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// Exprs returns every query of the dashboard, keyed by panel title.
func (d Dashboard) Exprs() map[string][]string {
	exprs := map[string][]string{}
	var walk func([]Panel)
	walk = func(panels []Panel) {
		for _, p := range panels {
			for _, target := range p.Targets {
				exprs[p.Title] = append(exprs[p.Title], target.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return exprs
}

// Rules is a Prometheus rules file.
type Rules struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []Rule `yaml:"rules"`
	} `yaml:"groups"`
}

// Rule is one alerting or recording rule.
type Rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// LoadRules parses a rules file strictly: a misspelled key is an error, as
// it is for Prometheus.
func LoadRules(t testing.TB, path string) Rules {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var r Rules
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

// Exprs returns every rule's expression, keyed by alert (or record) name.
func (r Rules) Exprs() map[string][]string {
	exprs := map[string][]string{}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			name := rule.Alert + rule.Record
			exprs[name] = append(exprs[name], rule.Expr)
		}
	}
	return exprs
}

// Used returns the metric names the dashboard and alert rules of the module
// at root use, each mapped to where (panel or alert) it is used.
func Used(t testing.TB, root string) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	add := func(kind string, exprs map[string][]string) {
		for where, list := range exprs {
			for _, expr := range list {
				for _, name := range MetricNames(expr) {
					used[name] = append(used[name], kind+" "+where)
				}
			}
		}
	}
	add("panel", LoadDashboard(t, filepath.Join(root, DashboardFile)).Exprs())
	add("alert", LoadRules(t, filepath.Join(root, AlertsFile)).Exprs())
	return used
}

// Selector is a metric a query selects with equality matchers on
// CheckedLabels, e.g. resilience_breaker_state{name="catalog"}: Labels
// {"name": "catalog"}. Other matchers (!=, =~, !~) and other labels are left
// out.
type Selector struct {
	Metric string
	Labels map[string]string
}

func (s Selector) String() string {
	pairs := make([]string, 0, len(s.Labels))
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, s.Labels[k]))
	}
	return s.Metric + "{" + strings.Join(pairs, ", ") + "}"
}

var (
	selectorRE = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^{}]*)\}`)
	matcherRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`)")
)

// Selectors returns the selectors of expr that match labels by equality, in
// order of appearance.
func Selectors(expr string) []Selector {
	var out []Selector
	for _, m := range selectorRE.FindAllStringSubmatch(expr, -1) {
		sel := Selector{Metric: m[1], Labels: map[string]string{}}
		for _, lm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			if lm[2] != "=" || !slices.Contains(CheckedLabels, lm[1]) {
				continue
			}
			v := lm[3]
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			} else {
				v = v[1 : len(v)-1] // a single-quoted PromQL string without escapes
			}
			sel.Labels[lm[1]] = v
		}
		if len(sel.Labels) > 0 {
			out = append(out, sel)
		}
	}
	return out
}

// SelectorUse is a selector and where (panel or alert) queries use it.
type SelectorUse struct {
	Selector
	Where []string
}

// UsedSelectors returns the label-matching selectors the dashboard and alert
// rules of the module at root use, sorted, each with where it is used.
func UsedSelectors(t testing.TB, root string) []SelectorUse {
	t.Helper()
	used := map[string]*SelectorUse{}
	add := func(kind string, exprs map[string][]string) {
		for where, list := range exprs {
			for _, expr := range list {
				for _, sel := range Selectors(expr) {
					u, ok := used[sel.String()]
					if !ok {
						u = &SelectorUse{Selector: sel}
						used[sel.String()] = u
					}
					u.Where = append(u.Where, kind+" "+where)
				}
			}
		}
	}
	add("panel", LoadDashboard(t, filepath.Join(root, DashboardFile)).Exprs())
	add("alert", LoadRules(t, filepath.Join(root, AlertsFile)).Exprs())
	out := make([]SelectorUse, 0, len(used))
	for _, key := range slices.Sorted(maps.Keys(used)) {
		out = append(out, *used[key])
	}
	return out
}

// PromQL is parsed with regular expressions on purpose: the real parser
// lives in github.com/prometheus/prometheus, a dependency far larger than
// this whole module. The queries here are ours and plain, so removing what
// cannot be a metric name is enough:
//   - string literals (label values, e.g. route="/health") and Grafana
//     variables ($__rate_interval);
//   - label matchers {…} and range/subquery selectors […];
//   - label lists of by/without/on/ignoring/group_left/group_right (…);
//   - identifiers followed by "(" (functions and aggregations);
//   - keywords and identifiers glued to a number (durations such as 5m,
//     exponents such as 1e3).
//
// What remains are the metric names.
var (
	stringLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	variable      = regexp.MustCompile(`\$\{?\w+\}?`)
	braces        = regexp.MustCompile(`\{[^{}]*\}`)
	brackets      = regexp.MustCompile(`\[[^\[\]]*\]`)
	labelList     = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	identifier    = regexp.MustCompile(`(^|[^A-Za-z0-9_:.])([A-Za-z_:][A-Za-z0-9_:]*)`)
	keywords      = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
		"and", "or", "unless", "offset", "inf", "nan", "Inf", "NaN"}
)

// MetricNames returns the metric names a PromQL expression selects, sorted
// and without duplicates.
func MetricNames(expr string) []string {
	s := stringLiteral.ReplaceAllString(expr, `""`)
	s = variable.ReplaceAllString(s, " ")
	s = braces.ReplaceAllString(s, " ")
	s = brackets.ReplaceAllString(s, " ")
	s = labelList.ReplaceAllString(s, " ")
	var names []string
	for _, m := range identifier.FindAllStringSubmatchIndex(s, -1) {
		name := s[m[4]:m[5]]
		call := strings.HasPrefix(strings.TrimLeft(s[m[5]:], " \t\n"), "(")
		if call || slices.Contains(keywords, name) {
			continue
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Exported scrapes url (a /metrics endpoint) and returns the names a query
// can select: each family's name, plus _bucket, _sum and _count for
// histograms and _sum and _count for summaries.
func Exported(t testing.TB, url string) []string {
	t.Helper()
	return names(scrape(t, url))
}

// scrape reads the metric families of a /metrics endpoint.
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape %s: %s: %s", url, resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return families
}

func names(families map[string]*dto.MetricFamily) []string {
	var names []string
	for name, f := range families {
		names = append(names, name)
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names = append(names, name+"_bucket", name+"_sum", name+"_count")
		case dto.MetricType_SUMMARY:
			names = append(names, name+"_sum", name+"_count")
		}
	}
	slices.Sort(names)
	return names
}

// hasSeries reports whether families hold a series that sel selects: one of
// its metric's family (a histogram's, for _bucket, _sum and _count) carrying
// every label value sel matches.
func hasSeries(families map[string]*dto.MetricFamily, sel Selector) bool {
	f, ok := families[sel.Metric]
	if !ok {
		f = families[BaseName(sel.Metric)]
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, p := range m.GetLabel() {
			labels[p.GetName()] = p.GetValue()
		}
		matches := true
		for k, v := range sel.Labels {
			matches = matches && labels[k] == v
		}
		if matches {
			return true
		}
	}
	return false
}

// BaseName strips the series suffix a histogram or summary query adds, so
// http_request_duration_seconds_bucket is owned as
// http_request_duration_seconds.
func BaseName(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			return base
		}
	}
	return name
}

// Owner returns the binary that owns name (or its base name), or "".
func Owner(name string) string {
	for binary, owned := range Owners {
		if slices.Contains(owned, name) || slices.Contains(owned, BaseName(name)) {
			return binary
		}
	}
	return ""
}

// CheckExported fails the test for each metric the dashboard or the alert
// rules use that binary owns but its /metrics at url does not export, and for
// each label value they select on such a metric (name="catalog") that no
// exported series carries. The caller must have exercised the process first:
// a labelled series appears only once a label combination has been used.
func CheckExported(t testing.TB, binary, url string) {
	t.Helper()
	families := scrape(t, url)
	exported := names(families)
	root := Root(t)
	used := Used(t, root)
	checked := 0
	for _, name := range slices.Sorted(maps.Keys(used)) {
		if Owner(name) != binary {
			continue
		}
		checked++
		if !slices.Contains(exported, name) {
			t.Errorf("%s does not export %s, used by %s", binary, name, strings.Join(used[name], ", "))
		}
	}
	if checked == 0 {
		t.Errorf("no metric of %s is used by the dashboard or alerts: is the Owners table right?", binary)
	}
	for _, use := range UsedSelectors(t, root) {
		if Owner(use.Metric) != binary || !slices.Contains(exported, use.Metric) {
			continue // another binary's, or already reported above
		}
		if !hasSeries(families, use.Selector) {
			t.Errorf("%s exports no series %s, used by %s", binary, use.Selector, strings.Join(use.Where, ", "))
		}
	}
	if t.Failed() {
		t.Logf("%s exports: %s", binary, fmt.Sprint(exported))
	}
}
