package paymentsim

import "github.com/resilientcheckout/checkout/internal/sim/simulator"

// routes lists every endpoint in one place: the provider protocol here,
// /health, /metrics and the admin API (faults, stats, reset) in
// simulator.Routes.
func (s *Simulator) routes() {
	s.srv.Handle("POST /v1/charges", s.handleCharge())
	s.srv.Handle("GET /v1/charges", s.handleLookup())
	simulator.Routes[faultRequest](s.srv, simulator.Admin{
		Stats:    func() any { return s.Stats() },
		Reset:    s.Reset,
		ResetLog: "ledger and stats reset",
	})
}
