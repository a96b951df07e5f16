package telemetrytest

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestMetricNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`max by (job, name) (resilience_breaker_state) == 2`, []string{"resilience_breaker_state"}},
		{`sum by (code) (rate(http_request_duration_seconds_count{job="checkout", route="/orders"}[$__rate_interval]))`,
			[]string{"http_request_duration_seconds_count"}},
		{`histogram_quantile(0.95, sum by (job, le) (rate(http_request_duration_seconds_bucket{route="/health"}[1m]))) > 0.1`,
			[]string{"http_request_duration_seconds_bucket"}},
		{`a_total / ignoring(reason) group_left(x) b_total offset 5m > bool 1e3`, []string{"a_total", "b_total"}},
		{`rate(x_total[5m:30s]) and on(instance) y unless z{a=~"up|down"}`, []string{"x_total", "y", "z"}},
		{`sum without (le) (c_seconds_sum) / sum(c_seconds_count)`, []string{"c_seconds_count", "c_seconds_sum"}},
		{`label_replace(m, "dst", "$1", "src", "(.*)")`, []string{"m"}},
		{`ns:metric:rate5m * 2`, []string{"ns:metric:rate5m"}},
	}
	for _, tt := range tests {
		if got := MetricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("MetricNames(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	d := LoadDashboard(t, filepath.Join(Root(t), DashboardFile))
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", d.UID, d.Title)
	}
	exprs := d.Exprs()
	// The panels the dashboard must have, by the metric each must query.
	for _, want := range []string{
		"resilience_breaker_state", "resilience_calls_total", "resilience_bulkhead_in_use",
		"http_pool_in_use", "http_pool_rejected_total",
		"http_request_duration_seconds_bucket", "http_request_duration_seconds_count",
		"checkout_unsettled_orders", "checkout_unsettled_order_oldest_age_seconds",
		"paymentsim_charge_requests_in_flight", "checkout_charge_jobs_total",
		// The catalog panels: cache results, stale age, the simulator's latency.
		"catalog_cache_lookups_total", "catalog_cache_stale_age_seconds_bucket", "catalog_cache_entries",
		"catalogsim_price_duration_seconds_bucket",
	} {
		found := false
		for _, list := range exprs {
			for _, expr := range list {
				found = found || slices.Contains(MetricNames(expr), want)
			}
		}
		if !found {
			t.Errorf("no panel queries %s", want)
		}
	}
	// Each policy has its panels: the breaker state, the limit and calls in flight, and the
	// refusals, selected by the policy's name so that the two never share a line.
	for _, policy := range []string{"payment", "catalog"} {
		for _, metric := range []string{"resilience_breaker_state", "resilience_concurrency_limit", "resilience_bulkhead_in_use", "resilience_rejected_total", "resilience_calls_total"} {
			found := false
			for _, list := range exprs {
				for _, expr := range list {
					for _, sel := range Selectors(expr) {
						found = found || sel.Metric == metric && sel.Labels["name"] == policy
					}
				}
			}
			if !found {
				t.Errorf("no panel queries %s{name=%q}", metric, policy)
			}
		}
	}
	for title, list := range exprs {
		for _, expr := range list {
			if strings.TrimSpace(expr) == "" || len(MetricNames(expr)) == 0 {
				t.Errorf("panel %q: query %q selects no metric", title, expr)
			}
		}
	}
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	rules := LoadRules(t, filepath.Join(Root(t), AlertsFile))
	if len(rules.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	alerts := map[string]Rule{}
	for _, g := range rules.Groups {
		if g.Name == "" {
			t.Error("a rule group has no name")
		}
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("rule %q: want an alert name (no recording rules here)", r.Expr)
				continue
			}
			if _, dup := alerts[r.Alert]; dup {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			alerts[r.Alert] = r
			if len(MetricNames(r.Expr)) == 0 {
				t.Errorf("alert %s: expr %q selects no metric", r.Alert, r.Expr)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, sev)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s: no summary annotation", r.Alert)
			}
		}
	}
	// The alerts the rules must have, by the metric each must watch.
	for alert, metric := range map[string]string{
		"PaymentBreakerOpen":               "resilience_breaker_state",
		"PendingPaymentBacklogTooOld":      "checkout_unsettled_order_oldest_age_seconds",
		"HealthEndpointSlow":               "http_request_duration_seconds_bucket",
		"OrdersFailingProviderUnavailable": "checkout_orders_failed_total",
		"BacklogQueryFailing":              "checkout_backlog_query_failed",
	} {
		r, ok := alerts[alert]
		if !ok {
			t.Errorf("alert %s missing", alert)
			continue
		}
		if got := MetricNames(r.Expr); !slices.Contains(got, metric) {
			t.Errorf("alert %s uses %q, want %s", alert, got, metric)
		}
	}
	// A breaker alert watches one policy's breaker: an open catalog breaker
	// is not a payment outage, and the two need different actions.
	for alert, want := range map[string]string{
		"PaymentBreakerOpen": `resilience_breaker_state{name="payment"}`,
		"CatalogBreakerOpen": `resilience_breaker_state{name="catalog"}`,
	} {
		var got []string
		for _, sel := range Selectors(alerts[alert].Expr) {
			got = append(got, sel.String())
		}
		if !slices.Equal(got, []string{want}) {
			t.Errorf("alert %s selects %q, want exactly %s", alert, got, want)
		}
	}
	if d, _ := model.ParseDuration(alerts["PaymentBreakerOpen"].For); time.Duration(d) < 10*time.Second {
		t.Errorf("PaymentBreakerOpen for %v: the breaker opens for ~1 s at a time by design; alert only on a lasting outage", d)
	}
}

// TestEveryQueriedMetricHasAnOwner: each binary's test checks the metrics
// Owners gives it, so a name no binary owns would go unchecked.
func TestEveryQueriedMetricHasAnOwner(t *testing.T) {
	t.Parallel()
	for name, where := range Used(t, Root(t)) {
		if Owner(name) == "" && !slices.Contains(PrometheusSeries, name) {
			t.Errorf("%s (used by %s) has no owner in telemetrytest.Owners", name, strings.Join(where, ", "))
		}
	}
}

func TestSelectors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want []string
	}{
		{`max by (job) (resilience_breaker_state{name="catalog"})`, []string{`resilience_breaker_state{name="catalog"}`}},
		// Prometheus's own labels, other labels and other matchers select no series to check.
		{`rate(http_request_duration_seconds_count{job="checkout", route="/orders"}[5m])`, nil},
		{`resilience_rejected_total{name!="payment"} + resilience_calls_total{name=~"cat.*"}`, nil},
		{`sum(rate(http_pool_rejected_total{pool="api"}[1m])) / on(job) resilience_calls_total{ name = 'payment', outcome="slow" }`,
			[]string{`http_pool_rejected_total{pool="api"}`, `resilience_calls_total{name="payment"}`}},
		{`up`, nil},
	}
	for _, tt := range tests {
		var got []string
		for _, sel := range Selectors(tt.expr) {
			got = append(got, sel.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Selectors(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

func TestHasSeries(t *testing.T) {
	t.Parallel()
	const text = `# TYPE resilience_breaker_state gauge
resilience_breaker_state{name="payment"} 0
# TYPE catalog_cache_stale_age_seconds histogram
catalog_cache_stale_age_seconds_bucket{le="+Inf"} 0
catalog_cache_stale_age_seconds_sum 0
catalog_cache_stale_age_seconds_count 0
`
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sel  Selector
		want bool
	}{
		{Selector{"resilience_breaker_state", map[string]string{"name": "payment"}}, true},
		{Selector{"resilience_breaker_state", map[string]string{"name": "catalog"}}, false}, // a policy the process does not run
		{Selector{"resilience_calls_total", map[string]string{"name": "payment"}}, false},
		{Selector{"catalog_cache_stale_age_seconds_bucket", map[string]string{}}, true},
	}
	for _, tt := range tests {
		if got := hasSeries(families, tt.sel); got != tt.want {
			t.Errorf("hasSeries(%s) = %v, want %v", tt.sel, got, tt.want)
		}
	}
}
