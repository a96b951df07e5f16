package lookupcost

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	labprocess "github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/payment"
)

// paymentsim is the provider: the real binary as a child process, at its defaults, and a
// client of its admin API (faults, reset, stats), which the lab speaks as an outside
// system's, not through paymentsim's types.
type paymentsim struct {
	url   string
	proc  *labprocess.Child
	admin *http.Client
}

// startPaymentsim runs the binary at path, its output in logPath, and waits for its /health.
func startPaymentsim(ctx context.Context, path, logPath string) (*paymentsim, error) {
	proc, err := labprocess.Launch(ctx, "paymentsim", path, nil, nil, logPath)
	if err != nil {
		return nil, err
	}
	return &paymentsim{url: proc.URL, proc: proc, admin: &http.Client{Timeout: 5 * time.Second}}, nil
}

// stop ends paymentsim with SIGTERM, as an orchestrator would.
func (s *paymentsim) stop() { _ = s.proc.Stop(5 * time.Second) }

// reset clears the faults and forgets every intent, key and count.
func (s *paymentsim) reset(ctx context.Context) error {
	if err := s.do(ctx, http.MethodDelete, "/admin/faults", "", nil); err != nil {
		return err
	}
	return s.do(ctx, http.MethodPost, "/admin/reset", "", nil)
}

// fault adds a fault (POST /admin/faults).
func (s *paymentsim) fault(ctx context.Context, body string) error {
	return s.do(ctx, http.MethodPost, "/admin/faults", body, nil)
}

// duplicates is the provider's own count of orders charged more than once.
func (s *paymentsim) duplicates(ctx context.Context) (int, error) {
	var stats struct {
		DuplicateReferences int `json:"duplicate_references"`
	}
	err := s.do(ctx, http.MethodGet, "/admin/stats", "", &stats)
	return stats.DuplicateReferences, err
}

func (s *paymentsim) do(ctx context.Context, method, path, body string, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := s.admin.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: status %d", method, path, resp.StatusCode)
	}
	if into == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// Audit compares the provider's list with what the lab believes of every order after
// settling: each order charged once or not at all, as believed.
type Audit struct {
	ChargedOnce int // believed paid, one succeeded PaymentIntent
	NotCharged  int // believed not charged, none
	Lost        int // believed not charged (or unsettled), yet charged
	Missing     int // believed paid, yet not charged
	Doubled     int // charged more than once
}

// audit reads the provider's whole list through the product's ListCharges and counts the
// succeeded PaymentIntents of each order.
func (d *oneStep) audit(ctx context.Context, orders []*trackedOrder) (Audit, error) {
	charges := map[string]int{}
	q := payment.ListQuery{Limit: 100}
	for {
		page, err := d.client.ListCharges(ctx, q)
		if err != nil {
			return Audit{}, err
		}
		for _, c := range page.Charges {
			charges[c.Reference]++
		}
		if !page.HasMore {
			break
		}
		q.StartingAfter = page.Cursor
	}
	return newAudit(charges, orders), nil
}

// newAudit sets what the lab believes of each order against charges, its succeeded
// PaymentIntents by order id.
func newAudit(charges map[string]int, orders []*trackedOrder) Audit {
	var a Audit
	for _, o := range orders {
		n := charges[o.id.String()]
		switch {
		case n > 1:
			a.Doubled++
		case n == 1 && o.outcome == paid:
			a.ChargedOnce++
		case n == 1:
			a.Lost++
		case o.outcome == paid:
			a.Missing++
		default:
			a.NotCharged++
		}
	}
	return a
}
