package simulator

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"time"
)

// Timing is the part of a POST /admin/faults body that says when: the fault
// starts StartIn from now and lasts For (zero means until cleared). A
// simulator's request type embeds it next to its Fault, so the body is one
// flat JSON object.
type Timing struct {
	StartIn Duration `json:"start_in"`
	For     Duration `json:"duration"`
}

// Validate reports why the timing cannot be scheduled, or nil.
func (t Timing) Validate() error {
	if t.StartIn < 0 || t.For < 0 {
		return errors.New("start_in and duration must not be negative")
	}
	return nil
}

// FaultRequest is a simulator's body of POST /admin/faults: a struct that
// embeds its Fault and a Timing, and hands both over.
type FaultRequest[F any] interface {
	Parts() (F, Timing)
}

// faultsView is the body of GET /admin/faults.
type faultsView[F any] struct {
	Active  F           `json:"active"`
	Windows []Window[F] `json:"windows"`
}

func (s *Server[F]) handleListFaults() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		now := time.Now()
		WriteJSON(w, http.StatusOK, faultsView[F]{
			Active:  s.Faults.Active(now),
			Windows: s.Faults.List(now),
		})
	}
}

func handleAddFault[R FaultRequest[F], F Fault[F]](s *Server[F]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req R
		if err := DecodeStrict(http.MaxBytesReader(w, r.Body, s.maxAdminBody), &req); err != nil {
			WriteError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		fault, timing := req.Parts()
		err := timing.Validate()
		if err == nil {
			err = fault.Validate()
		}
		if err != nil {
			WriteError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		start := time.Now().Add(time.Duration(timing.StartIn))
		var end time.Time
		if timing.For > 0 {
			end = start.Add(time.Duration(timing.For))
		}
		win := s.Faults.Add(fault, start, end)
		s.Logger.Info("fault scheduled", "window", win)
		WriteJSON(w, http.StatusCreated, win)
	}
}

func (s *Server[F]) handleClearFaults() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.Faults.Clear()
		s.Logger.Info("faults cleared")
		w.WriteHeader(http.StatusNoContent)
	}
}

func handleStats(stats func() any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, stats())
	}
}

func (s *Server[F]) handleReset(reset func(), logLine string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		reset()
		s.Logger.Info(logLine)
		w.WriteHeader(http.StatusNoContent)
	}
}

// RequireToken guards the admin API with a bearer token when one is
// configured; without one the admin API is open, which suits the local demo
// (compose publishes it on 127.0.0.1 only, and the binaries refuse to serve
// it open beyond loopback unless told to). realm names the API in the
// WWW-Authenticate challenge.
func RequireToken(token, realm string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if token == "" {
			return next
		}
		want := []byte("Bearer " + token)
		challenge := `Bearer realm="` + realm + `"`
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				w.Header().Set("WWW-Authenticate", challenge)
				WriteError(w, http.StatusUnauthorized, "authentication_error", "a valid admin bearer token is required")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
