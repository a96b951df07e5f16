package api

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/resilientcheckout/checkout/internal/idempotency"
	"github.com/resilientcheckout/checkout/internal/order"
)

// maxBodyBytes caps POST /orders bodies. The largest valid order (100 items
// of 64-character SKUs) is under 10 KiB; 1 MiB is the ceiling of docs/design.md, "Checkout API".
const maxBodyBytes = 1 << 20

// bodyReadTimeout bounds the upload of an order document: 1 MiB takes well
// under a second on any link a checkout client uses.
const bodyReadTimeout = 2 * time.Second

// stalePricesHeader marks an answer whose prices were checked against cached
// catalog prices kept while the catalog was unavailable:
// "Catalog-Prices: stale; age=95" (an RFC 9651 item, age in seconds). A
// header rather than a field of the order: staleness describes how this
// request was checked, not the order, which GET /orders/{id} shows the same
// way later; and Warning, the old convention, is obsolete (RFC 9111, 5.5).
// Replays do not repeat it: they answer from the recorded order.
const stalePricesHeader = "Catalog-Prices"

func stalePrices(age time.Duration) string {
	return "stale; age=" + strconv.FormatInt(int64(age/time.Second), 10)
}

// placeOrder handles POST /orders.
func placeOrder(svc *order.Service, metrics *Metrics, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isJSON(r.Header.Get("Content-Type")) {
			writeProblem(w, newProblem(http.StatusUnsupportedMediaType, "", "Send the order as application/json."))
			return
		}
		key, err := idempotency.ParseKey(r.Header.Get(idempotency.Header))
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		// The body is read inside an API pool slot: a client trickling it in
		// must not hold the slot for the server's whole ReadTimeout.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeProblem(w, newProblem(http.StatusRequestEntityTooLarge, "", "The body must be at most 1 MiB."))
			return
		}
		if err != nil {
			writeProblem(w, newProblem(http.StatusBadRequest, "malformed-order", "The body could not be read."))
			return
		}
		req, err := decodePlaceRequest(body)
		if err != nil {
			writeError(w, r, log, err)
			return
		}

		var placed order.Placed
		if customer, ok := customerOf(r); ok {
			placed, err = svc.PlaceAs(r.Context(), customer, key, req)
		} else {
			placed, err = svc.Place(r.Context(), key, req)
		}
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		if placed.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		} else {
			annotate(r.Context(), slog.String("order_id", placed.Order.ID.String()), slog.String("order_status", string(placed.Order.Status)))
			metrics.orders.WithLabelValues(string(placed.Order.Status)).Inc()
		}
		if placed.RetryAfter > 0 {
			w.Header().Set("Retry-After", seconds(placed.RetryAfter))
		}
		if placed.Prices.Stale {
			w.Header().Set(stalePricesHeader, stalePrices(placed.Prices.Age))
		}
		writePlaced(w, placed.Order)
	})
}

// getOrder handles GET /orders/{id}. An id that is not a UUID cannot name an
// order, so it is a 404 like any unknown id.
func getOrder(svc *order.Service, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(chi.URLParam(r, "id"))
		if err != nil {
			writeError(w, r, log, order.ErrNotFound)
			return
		}
		var o order.Order
		if customer, ok := customerOf(r); ok {
			o, err = svc.GetAs(r.Context(), customer, id)
		} else {
			o, err = svc.Get(r.Context(), id)
		}
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		writeJSON(w, http.StatusOK, o)
	})
}

// writePlaced renders the answer of POST /orders for an order as placed:
// the same order gives the same bytes, so a replay, rebuilt from the answer
// recorded with the order, repeats the first response exactly.
func writePlaced(w http.ResponseWriter, o order.Order) {
	w.Header().Set("Location", "/orders/"+o.ID.String())
	switch o.Status {
	case order.StatusPaymentFailed:
		p := newProblem(http.StatusPaymentRequired, "payment-failed", "The payment was not accepted.")
		p.OrderID, p.FailureReason = o.ID.String(), o.FailureReason
		writeProblem(w, p)
	case order.StatusPaid:
		writeJSON(w, http.StatusCreated, o)
	default: // pending_payment: the worker charges it later
		writeJSON(w, http.StatusAccepted, o)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v) // cannot fail: the values have no unencodable fields
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}
