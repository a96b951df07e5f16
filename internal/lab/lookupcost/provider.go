package lookupcost

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/resilientcheckout/checkout/internal/payment"
)

// paymentsim is the provider: the real binary as a child process, at its defaults, and a
// client of its admin API (faults, reset, stats), which the lab speaks as an outside
// system's, not through paymentsim's types.
type paymentsim struct {
	url   string
	cmd   *exec.Cmd
	admin *http.Client
}

// startPaymentsim runs the binary at path on a free loopback port, its output in logPath,
// and waits for its /health.
func startPaymentsim(ctx context.Context, path, logPath string) (*paymentsim, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close() // paymentsim binds it next; nothing else on loopback takes it in between
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.CommandContext(ctx, path)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HTTP_ADDR=" + addr}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start paymentsim: %w", err)
	}
	sim := &paymentsim{url: "http://" + addr, cmd: cmd, admin: &http.Client{Timeout: 5 * time.Second}}
	for deadline := time.Now().Add(15 * time.Second); ; {
		if err := sim.do(ctx, http.MethodGet, "/health", "", nil); err == nil {
			return sim, nil
		} else if time.Now().After(deadline) {
			sim.stop()
			return nil, fmt.Errorf("paymentsim not healthy within 15 s (see %s): %w", logPath, err)
		}
		time.Sleep(50 * time.Millisecond) // polling another process
	}
}

// stop ends paymentsim with SIGTERM, as an orchestrator would.
func (s *paymentsim) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait() // exits non-zero on the signal; nothing to report
}

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
