package paymentsim

import (
	"net/http"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// lookupResult is the body of a 200 answer to GET /v1/charges.
type lookupResult struct {
	Data []charge `json:"data"`
}

// handleLookup serves GET /v1/charges?reference=<order id>: the successful charges for that
// reference, oldest first, from the charge record (not the key cache, so the answer outlives
// forgotten keys). An outage of a real provider takes its lookup down with its charges, so the
// same faults apply, read once as the request arrives: refused connections, down, hang, error
// rate and latency. reset_after_charge concerns charges only; a lookup is answered.
func (s *Simulator) handleLookup() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		out := s.serveLookup(w, r, s.srv.Faults.Active(start))
		s.metrics.observeLookup(out)
	}
}

func (s *Simulator) serveLookup(w http.ResponseWriter, r *http.Request, fault Fault) outcome {
	if out, stop := s.injectFault(w, r, fault); stop {
		return out
	}
	query := r.URL.Query()
	refs := query["reference"]
	if len(query) != 1 || len(refs) != 1 || !isToken(refs[0], 255) {
		simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error",
			"exactly one query parameter is expected: reference, 1 to 255 visible ASCII characters")
		return simulator.OutcomeInvalid
	}
	// Unlike a charge, a lookup changes nothing: there is no reason to finish one whose
	// client has gone.
	simulator.Sleep(r.Context(), s.latency()+time.Duration(fault.Latency))
	if r.Context().Err() != nil {
		return simulator.OutcomeAbandoned
	}
	found := s.ledger.find(refs[0])
	if found == nil {
		found = []charge{} // "data": [], never null
	}
	simulator.WriteJSON(w, http.StatusOK, lookupResult{Data: found})
	return outcomeFound
}
