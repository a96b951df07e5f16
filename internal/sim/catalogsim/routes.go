package catalogsim

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes lists every endpoint in one place. The admin API lives under its
// own prefix so it can be guarded (and firewalled) apart from the protocol.
func (s *Simulator) routes() {
	s.mux.Handle("GET /v1/prices", s.handlePrices())
	s.mux.Handle("GET /health", handleHealth())
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))

	admin := requireToken(s.cfg.AdminToken)
	s.mux.Handle("GET /admin/faults", admin(s.handleListFaults()))
	s.mux.Handle("POST /admin/faults", admin(s.handleAddFault()))
	s.mux.Handle("DELETE /admin/faults", admin(s.handleClearFaults()))
	s.mux.Handle("GET /admin/prices", admin(s.handleListPrices()))
	s.mux.Handle("PUT /admin/prices/{sku}", admin(s.handleSetPrice()))
	s.mux.Handle("DELETE /admin/prices/{sku}", admin(s.handleDeletePrice()))
	s.mux.Handle("GET /admin/stats", admin(s.handleStats()))
	s.mux.Handle("POST /admin/reset", admin(s.handleReset()))
}

func handleHealth() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}
