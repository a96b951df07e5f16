// Package simtest runs the payment provider simulator for tests: over real
// HTTP, driven through its admin API the way the demo and the experiment
// drive it.
package simtest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
)

// Server is a simulator listening on a loopback port.
type Server struct {
	URL string
	Sim *paymentsim.Simulator
}

// Start runs a simulator with the given processing latency until the test
// ends. Faults are cleared before the server closes: httptest.Server.Close
// waits for running handlers, and a hung request would block it forever.
func Start(t testing.TB, latency time.Duration) *Server {
	t.Helper()
	return StartConfig(t, paymentsim.Config{Latency: latency})
}

// StartConfig is Start with a whole simulator configuration, e.g. a small
// LedgerCap to make the provider forget idempotency keys.
func StartConfig(t testing.TB, cfg paymentsim.Config) *Server {
	t.Helper()
	sim := paymentsim.New(cfg)
	srv := httptest.NewServer(sim)
	s := &Server{URL: srv.URL, Sim: sim}
	t.Cleanup(srv.Close)
	t.Cleanup(func() { s.admin(context.Background(), http.MethodDelete, "/admin/faults", "") })
	return s
}

// Fault injects a fault, e.g. `{"hang":true}` or
// `{"latency":"10s","start_in":"500ms","duration":"3s"}`.
func (s *Server) Fault(t testing.TB, fault string) {
	t.Helper()
	if code := s.admin(t.Context(), http.MethodPost, "/admin/faults", fault); code != http.StatusCreated {
		t.Fatalf("simulator: POST /admin/faults %s: status %d", fault, code)
	}
}

// Heal clears every fault.
func (s *Server) Heal(t testing.TB) {
	t.Helper()
	if code := s.admin(t.Context(), http.MethodDelete, "/admin/faults", ""); code != http.StatusNoContent {
		t.Fatalf("simulator: DELETE /admin/faults: status %d", code)
	}
}

// Reset forgets charges and restarts the max in-flight count.
func (s *Server) Reset(t testing.TB) {
	t.Helper()
	if code := s.admin(t.Context(), http.MethodPost, "/admin/reset", ""); code != http.StatusNoContent {
		t.Fatalf("simulator: POST /admin/reset: status %d", code)
	}
}

// Stats reads the ledger over the admin API once every charge in progress
// has been recorded (charges outlive clients that gave up).
func (s *Server) Stats(t testing.TB) paymentsim.Stats {
	t.Helper()
	<-s.Sim.Idle()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/admin/stats", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("simulator: GET /admin/stats: %v", err)
	}
	defer resp.Body.Close()
	var st paymentsim.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("simulator: decode stats: %v", err)
	}
	return st
}

func (s *Server) admin(ctx context.Context, method, path, body string) int {
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Charge creates and confirms a PaymentIntent of 2598 USD for orderID under the idempotency
// key key, as another client of the provider would — the dashboard, a lost release — and
// returns its id. It speaks the protocol by hand, not through internal/payment, so a test
// of the client's reads does not depend on its writes.
func (s *Server) Charge(t testing.TB, orderID, key string) string {
	t.Helper()
	form := url.Values{"amount": {"2598"}, "currency": {"usd"}, "payment_method": {"pm_card_visa"}, "confirm": {"true"},
		"metadata[order_id]": {orderID}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/v1/payment_intents", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer sk_test_simtest")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("simulator: create a PaymentIntent: %v", err)
	}
	defer resp.Body.Close()
	var pi struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pi); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("simulator: create a PaymentIntent for %s: status %d, %v", orderID, resp.StatusCode, err)
	}
	return pi.ID
}
