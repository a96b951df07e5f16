package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/resilientcheckout/checkout/internal/idempotency"
	"github.com/resilientcheckout/checkout/internal/order"
)

// problemContentType is RFC 9457's media type.
const problemContentType = "application/problem+json"

// problemBase prefixes the problem type URIs. They identify problems; they
// are not meant to be dereferenced.
const problemBase = "urn:problem-type:checkout:"

// Problem is an RFC 9457 Problem Details body.
type Problem struct {
	Type          string             `json:"type"`
	Title         string             `json:"title"`
	Status        int                `json:"status"`
	Detail        string             `json:"detail,omitempty"`
	Errors        []order.FieldError `json:"errors,omitempty"`
	OrderID       string             `json:"order_id,omitempty"`
	FailureReason string             `json:"failure_reason,omitempty"`
}

func newProblem(status int, slug, detail string) Problem {
	typ := "about:blank"
	if slug != "" {
		typ = problemBase + slug
	}
	return Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail}
}

func writeProblem(w http.ResponseWriter, p Problem) {
	body, _ := json.Marshal(p) // cannot fail: strings and ints only
	writeResponse(w, idempotency.Response{Status: p.Status, ContentType: problemContentType, Body: body})
}

func writeResponse(w http.ResponseWriter, r idempotency.Response) {
	h := w.Header()
	h.Set("Content-Type", r.ContentType)
	if r.Location != "" {
		h.Set("Location", r.Location)
	}
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.Body)
}

// retryAfterUnavailable is the Retry-After of a 503 when the database is
// down: the pool reconnects within a couple of seconds once it is back.
const retryAfterUnavailable = 2 * time.Second

// writeError is the one place where errors become HTTP statuses. Only
// unexpected errors are logged as errors; their text never reaches the
// client, which could learn internal addresses or SQL from it.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var invalid *order.ValidationError
	var p Problem
	switch {
	case errors.As(err, &invalid):
		p = newProblem(http.StatusUnprocessableEntity, "invalid-order", "The order has invalid fields; see errors.")
		p.Errors = invalid.Fields
	case errors.Is(err, order.ErrMalformed):
		p = newProblem(http.StatusBadRequest, "malformed-order", err.Error())
	case errors.Is(err, idempotency.ErrInvalidKey):
		p = newProblem(http.StatusBadRequest, "invalid-idempotency-key", err.Error())
	case errors.Is(err, order.ErrKeyInUse):
		w.Header().Set("Retry-After", "1")
		p = newProblem(http.StatusConflict, "request-in-progress", err.Error()+"; retry later.")
	case errors.Is(err, order.ErrKeyReused):
		p = newProblem(http.StatusUnprocessableEntity, "idempotency-key-reused", err.Error()+"; use a new key for a new order.")
	case errors.Is(err, order.ErrNotFound):
		p = newProblem(http.StatusNotFound, "", "No order has this id.")
	case errors.Is(err, order.ErrUnavailable):
		log.WarnContext(r.Context(), "database unavailable", "err", err)
		w.Header().Set("Retry-After", seconds(retryAfterUnavailable))
		p = newProblem(http.StatusServiceUnavailable, "storage-unavailable", "The order could not be stored or settled right now. Retry with the same Idempotency-Key: a retry never creates a second order or charge.")
	case errors.Is(err, order.ErrProviderTimeout):
		p = newProblem(http.StatusGatewayTimeout, "payment-timeout", "The payment provider did not answer in time. The order is saved and will be charged later.")
	case errors.Is(err, order.ErrProviderUnavailable):
		p = newProblem(http.StatusBadGateway, "payment-unavailable", "The payment provider failed. The order is saved and will be charged later.")
	default:
		log.ErrorContext(r.Context(), "unexpected error", "err", err)
		p = newProblem(http.StatusInternalServerError, "", "An unexpected error occurred.")
	}
	writeProblem(w, p)
}

// seconds formats a Retry-After value, rounding up to at least 1.
func seconds(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}
