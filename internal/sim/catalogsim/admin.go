package catalogsim

import (
	"net/http"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// maxAdminBody bounds an admin request body; a real one is tens of bytes.
const maxAdminBody = 16 << 10

func (s *Simulator) handleListPrices() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		simulator.WriteJSON(w, http.StatusOK, s.book.all())
	}
}

// handleSetPrice serves PUT /admin/prices/{sku}: add the SKU or change its
// price, as a merchant would, to show checkout's 409 price-changed.
func (s *Simulator) handleSetPrice() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sku := r.PathValue("sku")
		var p Price
		if err := simulator.DecodeStrict(http.MaxBytesReader(w, r.Body, maxAdminBody), &p); err != nil {
			simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		if p.UnitPrice <= 0 || !simulator.IsCurrency(p.Currency) {
			simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error",
				"want a positive unit_price in minor units and a currency of three uppercase letters")
			return
		}
		s.book.set(sku, p)
		s.srv.Logger.Info("price set", "sku", sku, "unit_price", p.UnitPrice, "currency", p.Currency)
		simulator.WriteJSON(w, http.StatusOK, p)
	}
}

func (s *Simulator) handleDeletePrice() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sku := r.PathValue("sku")
		if !s.book.remove(sku) {
			simulator.WriteError(w, http.StatusNotFound, "invalid_request_error", "no such SKU")
			return
		}
		s.srv.Logger.Info("SKU removed", "sku", sku)
		w.WriteHeader(http.StatusNoContent)
	}
}
