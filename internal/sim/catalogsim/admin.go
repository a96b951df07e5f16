package catalogsim

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// maxAdminBody bounds an admin request body; a real one is tens of bytes.
const maxAdminBody = 16 << 10

// faultRequest is the body of POST /admin/faults: a fault, optionally
// delayed by StartIn and limited to For (zero means until cleared).
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
		writeJSON(w, http.StatusOK, faultsView{Active: s.faults.active(now), Windows: s.faults.list(now)})
	}
}

func (s *Simulator) handleAddFault() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req faultRequest
		if err := decodeStrict(http.MaxBytesReader(w, r.Body, maxAdminBody), &req); err != nil {
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

func (s *Simulator) handleListPrices() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.book.all())
	}
}

// handleSetPrice serves PUT /admin/prices/{sku}: add the SKU or change its
// price, as a merchant would, to show checkout's 409 price-changed.
func (s *Simulator) handleSetPrice() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sku := r.PathValue("sku")
		var p Price
		if err := decodeStrict(http.MaxBytesReader(w, r.Body, maxAdminBody), &p); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		if p.UnitPrice <= 0 || !isCurrency(p.Currency) {
			writeError(w, http.StatusBadRequest, "invalid_request_error",
				"want a positive unit_price in minor units and a currency of three uppercase letters")
			return
		}
		s.book.set(sku, p)
		s.logger.Info("price set", "sku", sku, "unit_price", p.UnitPrice, "currency", p.Currency)
		writeJSON(w, http.StatusOK, p)
	}
}

func (s *Simulator) handleDeletePrice() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sku := r.PathValue("sku")
		if !s.book.remove(sku) {
			writeError(w, http.StatusNotFound, "invalid_request_error", "no such SKU")
			return
		}
		s.logger.Info("SKU removed", "sku", sku)
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
		s.logger.Info("prices and stats reset")
		w.WriteHeader(http.StatusNoContent)
	}
}

// decodeStrict decodes exactly one JSON value into v, rejecting unknown
// fields and trailing data.
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decode body: unexpected data after the JSON object")
	}
	return nil
}

// requireToken guards the admin API with a bearer token when one is
// configured; without one the admin API is open, which suits the local
// demo (compose publishes it on 127.0.0.1 only).
func requireToken(token string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if token == "" {
			return next
		}
		want := []byte("Bearer " + token)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="catalogsim admin"`)
				writeError(w, http.StatusUnauthorized, "authentication_error", "a valid admin bearer token is required")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
