package paymentsim

import "github.com/resilientcheckout/checkout/internal/sim/simulator"

// routes lists every endpoint in one place: the provider protocol here (the PaymentIntents
// subset of Stripe's API, see intent.go), /health, /metrics and the admin API (faults,
// stats, reset) in simulator.Routes.
func (s *Simulator) routes() {
	s.srv.Handle("POST /v1/payment_intents", s.handleCreateIntent())
	s.srv.Handle("POST /v1/payment_intents/{id}/confirm", s.handleConfirmIntent())
	s.srv.Handle("GET /v1/payment_intents", s.handleListIntents())
	s.srv.Handle("GET /v1/payment_intents/{id}", s.handleRetrieveIntent())
	s.srv.Handle("GET /v1/payment_intents/search", s.handleSearchIntents())
	simulator.Routes[faultRequest](s.srv, simulator.Admin{
		Stats:    func() any { return s.Stats() },
		Reset:    s.Reset,
		ResetLog: "ledger and stats reset",
	})
}
