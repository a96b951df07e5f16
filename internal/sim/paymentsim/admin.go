package paymentsim

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"time"
)

// faultRequest is the body of POST /admin/faults: a fault, optionally delayed by StartIn and
// limited to For (zero means until cleared).
type faultRequest struct {
	Fault
	StartIn Duration `json:"start_in"`
	For     Duration `json:"duration"`
}

func (req faultRequest) validate() error {
	if req.StartIn < 0 || req.For < 0 {
		return errors.New("start_in and duration must not be negative")
	}
	return req.Fault.validate()
}

// faultsView is the body of GET /admin/faults.
type faultsView struct {
	Active  Fault    `json:"active"`
	Windows []Window `json:"windows"`
}

func (s *Simulator) handleListFaults() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		now := time.Now()
		writeJSON(w, http.StatusOK, faultsView{
			Active:  s.faults.active(now),
			Windows: s.faults.list(now),
		})
	}
}

func (s *Simulator) handleAddFault() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req faultRequest
		if err := decodeStrict(http.MaxBytesReader(w, r.Body, maxBodyBytes), &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		if err := req.validate(); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		start := time.Now().Add(time.Duration(req.StartIn))
		var end time.Time
		if req.For > 0 {
			end = start.Add(time.Duration(req.For))
		}
		win := s.faults.add(req.Fault, start, end)
		s.logger.Info("fault scheduled", "window", win)
		writeJSON(w, http.StatusCreated, win)
	}
}

func (s *Simulator) handleClearFaults() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.faults.clear()
		s.logger.Info("faults cleared")
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Simulator) handleStats() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Stats())
	}
}

func (s *Simulator) handleReset() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.Reset()
		s.logger.Info("ledger and stats reset")
		w.WriteHeader(http.StatusNoContent)
	}
}

// requireToken guards the admin API with a bearer token when one is configured; without one
// the admin API is open, which suits the local demo.
func requireToken(token string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if token == "" {
			return next
		}
		want := []byte("Bearer " + token)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="paymentsim admin"`)
				writeError(w, http.StatusUnauthorized, "authentication_error", "a valid admin bearer token is required")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
