package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/resilientcheckout/checkout/internal/catalog"
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
	// Prices are the catalog's current prices of the order's SKUs
	// (409 price-changed), so a client can show the cart again.
	Prices map[string]price `json:"prices,omitempty"`
}

// price is a catalog price as clients see it.
type price struct {
	UnitPrice int64  `json:"unit_price"`
	Currency  string `json:"currency"`
}

func newProblem(status int, slug, detail string) Problem {
	typ := "about:blank"
	if slug != "" {
		typ = problemBase + slug
	}
	return Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail}
}

// writeProblem writes every problem document checkout answers with: this
// file is the one place they are made.
func writeProblem(w http.ResponseWriter, p Problem) {
	body, _ := json.Marshal(p) // cannot fail: strings and ints only
	w.Header().Set("Content-Type", problemContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// notFound answers requests for resources that do not exist.
func notFound(w http.ResponseWriter, _ *http.Request) {
	writeProblem(w, newProblem(http.StatusNotFound, "", "No such resource."))
}

// methodNotAllowed answers a known path with a method it does not serve,
// listing in Allow the methods it does (RFC 9110, 15.5.6). chi sets Allow
// only in its own 405 handler, so the router is asked path by method.
func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.Routes != nil {
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if rctx.Routes.Match(chi.NewRouteContext(), m, r.URL.Path) {
				w.Header().Add("Allow", m)
				if m == http.MethodGet { // served from GET (routes.go)
					w.Header().Add("Allow", http.MethodHead)
				}
			}
		}
	}
	writeProblem(w, newProblem(http.StatusMethodNotAllowed, "", "This resource does not support that method; see the Allow header."))
}

// poolFull is the answer of a full API or health pool (httpserver.Pool):
// written for every shed request while the server is saturated, so it is
// rendered once.
var poolFull = func() []byte {
	body, _ := json.Marshal(newProblem(http.StatusServiceUnavailable, "",
		"The server is at capacity. Retry after the time in the Retry-After header."))
	return body
}()

// PoolFull writes poolFull; httpserver.Pool calls it when it sheds a request.
func PoolFull(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", problemContentType)
	h.Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(poolFull)
}

// retryAfterUnavailable is the Retry-After of a 503 when the database is
// down: the pool reconnects within a couple of seconds once it is back.
const retryAfterUnavailable = 2 * time.Second

// writeError is the one place where errors become HTTP statuses. Only
// unexpected errors are logged as errors; their text never reaches the
// client, which could learn internal addresses or SQL from it.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var (
		invalid     *order.ValidationError
		mismatch    *catalog.MismatchError
		unavailable *catalog.UnavailableError
		unknown     *order.OutcomeUnknownError
		p           Problem
	)
	switch {
	case errors.As(err, &mismatch) && errors.Is(err, catalog.ErrUnknownSKU):
		p = newProblem(http.StatusUnprocessableEntity, "invalid-order", "The order has invalid fields; see errors.")
		for _, m := range mismatch.Items {
			p.Errors = append(p.Errors, order.FieldError{Field: fmt.Sprintf("items[%d].sku", m.Index), Detail: "is not in the catalog"})
		}
	case errors.As(err, &mismatch):
		p = newProblem(http.StatusConflict, "price-changed", "Prices or the currency differ from the catalog's; see prices. Show the customer the current prices and place the order again with a new Idempotency-Key.")
		p.Prices = make(map[string]price, len(mismatch.Prices))
		for sku, cp := range mismatch.Prices {
			p.Prices[sku] = price{UnitPrice: cp.UnitPrice, Currency: cp.Currency}
		}
	case errors.As(err, &unavailable):
		log.WarnContext(r.Context(), "catalog unavailable and no usable cached price", "err", err)
		w.Header().Set("Retry-After", seconds(unavailable.RetryAfter))
		p = newProblem(http.StatusServiceUnavailable, "catalog-unavailable", "Prices cannot be confirmed right now. Retry with the same Idempotency-Key.")
	case errors.As(err, &invalid):
		p = newProblem(http.StatusUnprocessableEntity, "invalid-order", "The order has invalid fields; see errors.")
		p.Errors = invalid.Fields
	case errors.Is(err, errMalformed):
		p = newProblem(http.StatusBadRequest, "malformed-order", err.Error())
	case errors.Is(err, idempotency.ErrInvalidKey):
		p = newProblem(http.StatusBadRequest, "invalid-idempotency-key", err.Error())
	case errors.Is(err, order.ErrKeyInUse):
		w.Header().Set("Retry-After", "1")
		p = newProblem(http.StatusConflict, "request-in-progress", err.Error()+"; retry later.")
	case errors.Is(err, order.ErrKeyReused):
		p = newProblem(http.StatusUnprocessableEntity, "idempotency-key-reused", err.Error()+"; use a new key for a new order.")
	case errors.Is(err, order.ErrOtherCustomer):
		p = newProblem(http.StatusForbidden, "other-customer", "customer_id must be the authenticated customer, or omitted.")
	case errors.Is(err, order.ErrNotFound):
		p = newProblem(http.StatusNotFound, "", "No order has this id.")
	case errors.As(err, &unknown):
		// Not a 503: that answer promises nothing was stored.
		log.WarnContext(r.Context(), "database did not say whether the order was stored", "err", err)
		w.Header().Set("Retry-After", seconds(unknown.RetryAfter))
		p = newProblem(http.StatusGatewayTimeout, "outcome-unknown", "The database did not confirm in time whether the order was stored. Retry with the same Idempotency-Key after Retry-After to learn the outcome; do not place the order again with a new key.")
	case errors.Is(err, order.ErrUnavailable):
		log.WarnContext(r.Context(), "database unavailable", "err", err)
		w.Header().Set("Retry-After", seconds(retryAfterUnavailable))
		p = newProblem(http.StatusServiceUnavailable, "storage-unavailable", "The order could not be accepted right now, and this request stored nothing. Retry with the same Idempotency-Key: if an earlier request with it stored the order, the retry answers that order.")
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
