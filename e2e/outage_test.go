package e2e

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/experiment"
	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// stack is the whole system as separate processes on one fresh database.
type stack struct {
	checkout, worker, sim *process.Process
	dbURL                 string
}

func startStack(t *testing.T, mode string) stack {
	t.Helper()
	s := stack{dbURL: dbtest.URL(t)}
	s.sim = process.StartBinary(t, binary("paymentsim"), nil, map[string]string{"HTTP_ADDR": "127.0.0.1:0"})
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": s.dbURL, "STRIPE_API_BASE": s.sim.URL}
	s.worker = process.StartBinary(t, binary("worker"), nil, env)
	env["RESILIENCE_MODE"] = mode
	s.checkout = process.StartBinary(t, binary("checkout"), nil, env)
	return s
}

// outage runs the experiment (docs/design.md, "Experiment"), shortened: 20 req/s for 4 s, the
// provider 10 s slower from 0.5 s to 2.5 s. The figures are the
// experiment's business (make experiment); these tests hold the invariants.
func outage(t *testing.T, s stack, rate float64) experiment.Report {
	t.Helper()
	cfg := experiment.DefaultConfig()
	cfg.CheckoutURL, cfg.SimulatorURL, cfg.DatabaseURL = s.checkout.URL, s.sim.URL, s.dbURL
	cfg.Rate, cfg.Duration, cfg.OutageFor = rate, 4*time.Second, 2*time.Second
	cfg.DrainTimeout = 45 * time.Second
	// The test process runs under the race detector beside other test
	// packages: allow the load generator more lag than the experiment's
	// 20 ms, which keeps its published figures honest.
	cfg.MaxLag = 250 * time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	report, err := experiment.Run(context.Background(), cfg)
	var late *experiment.ScheduleError
	if errors.As(err, &late) {
		t.Fatalf("the load generator fell behind schedule, so the run proves nothing: %v", err)
	}
	if err != nil {
		t.Fatalf("experiment: %v", err)
	}
	return report
}

// TestProtectedModeSurvivesProviderOutage: invariants 1, 2, 3 and 5 under
// the article's outage — /health never fails, every order is accepted
// (201/202, never 5xx), none is lost or charged twice, all are paid after.
func TestProtectedModeSurvivesProviderOutage(t *testing.T) {
	t.Parallel()
	s := startStack(t, "protected")
	r := outage(t, s, 20)
	defer logWhyOnFailure(t, s.checkout)

	for outcome, n := range r.Health.All.Outcomes {
		if outcome != "200" {
			t.Errorf("/health answered %s %d times, want 200 always", outcome, n)
		}
	}
	checkEveryOrderAccepted(t, r)
	a := r.Audit
	if !a.Drained || a.StillPending != 0 || a.Paid != a.Stored || a.Stored != a.Accepted {
		t.Errorf("after the drain: %d stored, %d accepted, %d paid, %d still pending (drained %v); want every accepted order paid",
			a.Stored, a.Accepted, a.Paid, a.StillPending, a.Drained)
	}
	if a.ProviderCharges != a.Paid {
		t.Errorf("provider charges = %d for %d paid orders", a.ProviderCharges, a.Paid)
	}
	if len(r.Breaker.Transitions) == 0 {
		t.Error("the breaker never changed state during the outage")
	}
}

// checkEveryOrderAccepted checks what a protected outage run must show of
// its orders: every one answered 201 or 202, some deferred by the outage,
// none lost and none charged twice.
// logWhyOnFailure logs, if t failed, checkout's 5xx requests and its
// warnings other than deferrals: a 503 logged as a request is the handler's
// (storage unavailable), one not logged is the API pool's shedding.
func logWhyOnFailure(t *testing.T, checkout *process.Process) {
	if !t.Failed() {
		return
	}
	var why []string
	for line := range strings.Lines(checkout.Logs()) {
		if strings.Contains(line, `"status":5`) || strings.Contains(line, `"level":"ERROR"`) ||
			strings.Contains(line, `"level":"WARN"`) && !strings.Contains(line, "payment deferred to the worker") {
			why = append(why, line)
		}
	}
	t.Logf("checkout's 5xx requests and warnings (%d):\n%s", len(why), strings.Join(why, ""))
}

func checkEveryOrderAccepted(t *testing.T, r experiment.Report, alsoAllowed ...string) {
	t.Helper()
	for outcome, n := range r.Checkout.All.Outcomes {
		if outcome != "201" && outcome != "202" && !slices.Contains(alsoAllowed, outcome) {
			t.Errorf("checkout answered %s %d times, want only 201 or 202", outcome, n)
		}
	}
	if r.Checkout.Outage.Outcomes["202"] == 0 {
		t.Error("no order was deferred during the outage: the provider fault did not bite")
	}
	if a := r.Audit; len(a.Lost) != 0 || a.DoubleCharged != 0 {
		t.Errorf("lost %v, charged twice %d; want none", a.Lost, a.DoubleCharged)
	}
}

// TestNoneModeShowsTheCascade runs the same outage without protection and
// checks that the experiment can see what protection prevents: /health,
// sharing the API pool with hung checkouts, fails. Without this the
// protected run's clean /health would prove nothing.
func TestNoneModeShowsTheCascade(t *testing.T) {
	t.Parallel()
	r := outage(t, startStack(t, "none"), 40)

	failures := r.Health.Outage.Count - r.Health.Outage.Outcomes["200"]
	if failures == 0 {
		t.Errorf("/health never failed in mode none at 40 req/s (outcomes %v): the experiment cannot show a cascade", r.Health.Outage.Outcomes)
	}
	t.Logf("mode none: /health failed %d of %d probes during the outage; checkout outcomes %v",
		failures, r.Health.Outage.Count, r.Checkout.Outage.Outcomes)
	if a := r.Audit; len(a.Lost) != 0 || a.DoubleCharged != 0 {
		t.Errorf("lost %v, double charged %d; want none, whatever the mode", a.Lost, a.DoubleCharged)
	}
}
