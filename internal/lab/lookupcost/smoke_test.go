package lookupcost

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	labprocess "github.com/resilientcheckout/checkout/internal/lab/process"
)

// TestRunSmoke runs every scenario for both designs, each a second or two at 10 orders/s,
// and checks what holds whatever the figures: every order charged once or not at all, as
// the lab believes, and each design sending the requests it is made of.
func TestRunSmoke(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	if err := labprocess.Build("../../..", bin, "./cmd/paymentsim"); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Paymentsim, cfg.DatabaseURL, cfg.LogDir = filepath.Join(bin, "paymentsim"), dbtest.URL(t), t.TempDir()
	cfg.Rate, cfg.Duration = 10, time.Second
	// A timeout five times paymentsim's 200 ms, so that a busy machine (make test runs
	// packages in parallel) does not turn a healthy answer into an unknown outcome.
	cfg.Timeout = time.Second
	// The hang starts on an order's arrival and is longer than the attempt timeout: the
	// orders within the hang go unanswered, and the two-step's created just before it have
	// their confirm hang.
	cfg.OutageLoad, cfg.HangAt, cfg.HangFor = 3*time.Second, 500*time.Millisecond, 2*time.Second
	// 5 charges a second against the two-step's 20 writes in about a second: some are refused.
	cfg.RateLimit = 5

	// A run that should take 20 s: a lookup asked again without end fails it, not the
	// package's timeout.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	report, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Phases) != 6 {
		t.Fatalf("%d phases, want 3 scenarios × 2 designs", len(report.Phases))
	}

	// A healthy order is a charge (one-step) or a create and a confirm (two-step), paid.
	for design, want := range map[string]struct{ charges, creates int }{"one-step": {1, 0}, "two-step": {1, 1}} {
		p := report.phase("healthy", design)
		if p.Paid != p.Orders || p.Orders == 0 {
			t.Errorf("healthy, %s: %d of %d orders paid, want all", design, p.Paid, p.Orders)
		}
		if got := [3]int{p.Charges, p.Creates, p.Lookups}; got != [3]int{want.charges * p.Orders, want.creates * p.Orders, 0} {
			t.Errorf("healthy, %s: charges, creates, lookups = %v for %d orders, want %d, %d, 0 an order", design, got, p.Orders, want.charges, want.creates)
		}
	}

	for _, design := range []string{"one-step", "two-step"} {
		if p := report.phase("rate limited", design); p.Paid != p.Orders {
			t.Errorf("rate limited, %s: %d of %d orders paid, want all once the 429s are waited out", design, p.Paid, p.Orders)
		}
	}
	if p := report.phase("rate limited", "two-step"); p.Throttled == 0 {
		t.Errorf("rate limited, two-step: no 429 for %d writes against a limit of %d a second", p.Charges+p.Creates, cfg.RateLimit)
	}

	// After the seed outage, settling must leave the lab believing what the provider's list
	// says of every order.
	for _, design := range []string{"one-step", "two-step"} {
		p := report.phase("seed outage", design)
		if p.Unknown == 0 {
			t.Errorf("seed outage, %s: no outcome left unknown, nothing to settle", design)
		}
		a := p.Audit
		if a.Lost != 0 || a.Missing != 0 || a.Doubled != 0 {
			t.Errorf("seed outage, %s: audit %+v, want none lost, missing or doubled", design, a)
		}
		if want := p.Paid + p.Settle.FoundCharged; a.ChargedOnce != want {
			t.Errorf("seed outage, %s: %d charged once on the list, want %d paid and %d found charged", design, a.ChargedOnce, p.Paid, p.Settle.FoundCharged)
		}
		if want := p.NotCharged + p.Unknown - p.Settle.FoundCharged; a.NotCharged != want {
			t.Errorf("seed outage, %s: %d not charged on the list, want %d", design, a.NotCharged, want)
		}
	}
	if p := report.phase("seed outage", "two-step"); p.Settle.Requests != p.Unknown || p.Settle.Failed != 0 {
		t.Errorf("seed outage, two-step: %d retrieves (%d failed) for %d unknown outcomes, want one each", p.Settle.Requests, p.Settle.Failed, p.Unknown)
	}

	var b strings.Builder
	if err := report.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if want := "| orders paid | 10 of 10 | 10 of 10 |"; !strings.Contains(b.String(), want) {
		t.Errorf("the table lacks %q", want)
	}
}
