package catalogsim

import "github.com/resilientcheckout/checkout/internal/sim/simulator"

// routes lists every endpoint in one place: the catalog protocol and the
// price admin here, /health, /metrics and the rest of the admin API (faults,
// stats, reset) in simulator.Routes.
func (s *Simulator) routes() {
	s.srv.Handle("GET /v1/prices", s.handlePrices())
	s.srv.HandleAdmin("GET /admin/prices", s.handleListPrices())
	s.srv.HandleAdmin("PUT /admin/prices/{sku}", s.handleSetPrice())
	s.srv.HandleAdmin("DELETE /admin/prices/{sku}", s.handleDeletePrice())
	simulator.Routes[faultRequest](s.srv, simulator.Admin{
		Stats:    func() any { return s.Stats() },
		Reset:    s.Reset,
		ResetLog: "prices and stats reset",
	})
}
