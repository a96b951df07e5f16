package paymentsim

import (
	"net/http"
	"strconv"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// lookupResult is the body of a 200 answer to GET /v1/charges?reference=….
type lookupResult struct {
	Data []charge `json:"data"`
}

// listResult is the body of a 200 answer to the charge list.
type listResult struct {
	Data    []charge `json:"data"`
	HasMore bool     `json:"has_more"`
}

// handleLookup serves GET /v1/charges?reference=<order id>: the successful charges for that
// reference, oldest first, from the charge record (not the key cache, so the answer outlives
// forgotten keys). An outage of a real provider takes its lookup down with its charges, so the
// same faults apply, read once as the request arrives: refused connections, down, hang, error
// rate and latency. reset_after_charge concerns charges only; a lookup is answered.
func (s *Simulator) handleLookup() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		fault := s.srv.Faults.Active(start)
		if fault != (Fault{}) {
			s.inflight.lookupDuringFault()
		}
		out := s.serveLookup(w, r, fault)
		s.metrics.observeLookup(out)
	}
}

func (s *Simulator) serveLookup(w http.ResponseWriter, r *http.Request, fault Fault) outcome {
	if out, stop := s.injectFault(w, r, fault); stop {
		return out
	}
	query := r.URL.Query()
	if !query.Has("reference") {
		return s.serveList(w, r, fault)
	}
	refs := query["reference"]
	if len(query) != 1 || len(refs) != 1 || !isToken(refs[0], 255) {
		simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error",
			"exactly one query parameter is expected: reference, 1 to 255 visible ASCII characters")
		return simulator.OutcomeInvalid
	}
	// Unlike a charge, a lookup changes nothing: there is no reason to finish one whose
	// client has gone.
	simulator.Sleep(r.Context(), s.latency(fault)+time.Duration(fault.Latency))
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

// serveList serves GET /v1/charges?created_gte=<RFC 3339>&created_lte=<RFC 3339>&limit=<1..100>&starting_after=<id>:
// the successful charges in the order they were made, as a real provider's charge list or
// settlement report does, for reconciling its ledger with the orders table. Every parameter
// is optional: created_gte defaults to the beginning, created_lte to no end, limit to 10.
func (s *Simulator) serveList(w http.ResponseWriter, r *http.Request, fault Fault) outcome {
	query := r.URL.Query()
	var (
		createdGTE time.Time
		createdLTE time.Time
		limit      = 10
		err        error
	)
	for name := range query {
		if name != "created_gte" && name != "created_lte" && name != "limit" && name != "starting_after" {
			simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", "unknown query parameter "+name)
			return simulator.OutcomeInvalid
		}
	}
	if v := query.Get("created_gte"); v != "" {
		if createdGTE, err = time.Parse(time.RFC3339Nano, v); err != nil {
			simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", "created_gte must be an RFC 3339 time")
			return simulator.OutcomeInvalid
		}
	}
	if v := query.Get("created_lte"); v != "" {
		if createdLTE, err = time.Parse(time.RFC3339Nano, v); err != nil {
			simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", "created_lte must be an RFC 3339 time")
			return simulator.OutcomeInvalid
		}
	}
	if v := query.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 100 {
			simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", "limit must be 1 to 100")
			return simulator.OutcomeInvalid
		}
	}
	after := query.Get("starting_after")
	if after != "" && !isToken(after, 255) {
		simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", "starting_after must be a charge id")
		return simulator.OutcomeInvalid
	}
	simulator.Sleep(r.Context(), s.latency(fault)+time.Duration(fault.Latency))
	if r.Context().Err() != nil {
		return simulator.OutcomeAbandoned
	}
	page, more, err := s.ledger.list(createdGTE, createdLTE, limit, after)
	if err != nil {
		simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", "starting_after: no such charge")
		return simulator.OutcomeInvalid
	}
	simulator.WriteJSON(w, http.StatusOK, listResult{Data: page, HasMore: more})
	return outcomeFound
}
