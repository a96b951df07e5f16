package paymentsim

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

const (
	// maxBodyBytes bounds a charge or admin request body; a real one is about a hundred bytes.
	maxBodyBytes = 16 << 10
	// declinedMethod is the test payment method that is always declined, as in Stripe's test mode.
	declinedMethod = "pm_card_chargeDeclined"
)

// chargeRequest is the body of POST /v1/charges. Two requests with one Idempotency-Key must
// carry equal chargeRequests, so the type stays comparable.
type chargeRequest struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Reference     string `json:"reference"`
}

// charge is the body of a 201 response.
type charge struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	Reference string    `json:"reference"`
	Created   time.Time `json:"created"`
}

// decodeCharge reads one strict JSON object: unknown fields, trailing data and invalid values
// are errors, so a client bug surfaces as a 400 instead of a charge for the wrong amount.
func decodeCharge(r io.Reader) (chargeRequest, error) {
	var req chargeRequest
	if err := simulator.DecodeStrict(r, &req); err != nil {
		return chargeRequest{}, err
	}
	if err := req.validate(); err != nil {
		return chargeRequest{}, err
	}
	return req, nil
}

func (req chargeRequest) validate() error {
	switch {
	case req.Amount <= 0:
		return errors.New("amount must be a positive integer of minor units")
	case !simulator.IsCurrency(req.Currency):
		return errors.New("currency must be three uppercase letters")
	case !isToken(req.PaymentMethod, 64):
		return errors.New("payment_method must be 1 to 64 visible ASCII characters")
	case !isToken(req.Reference, 255):
		return errors.New("reference must be 1 to 255 visible ASCII characters")
	}
	return nil
}

// isToken reports whether s is 1 to maxLen characters of visible ASCII (0x21–0x7E), the
// alphabet of idempotency keys, payment methods and references.
func isToken(s string, maxLen int) bool {
	if len(s) == 0 || len(s) > maxLen {
		return false
	}
	for _, c := range []byte(s) {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// handleCharge serves POST /v1/charges: the rate limit first, then faults (they stand for
// trouble in front of the provider's ledger), then validation, then the ledger, then
// processing.
func (s *Simulator) handleCharge() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		fault := s.srv.Faults.Active(start)
		done := s.inflight.add(fault != Fault{})
		outcome := s.serveCharge(w, r, fault)
		done()
		s.metrics.Observe(outcome, time.Since(start))
	}
}

// serveCharge answers one charge under fault, the faults active as it arrived.
func (s *Simulator) serveCharge(w http.ResponseWriter, r *http.Request, fault Fault) outcome {
	// Read the whole body first: net/http notices a client hanging up (and cancels
	// r.Context) only once the body has been consumed, and a hung request must notice.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", "read body: "+err.Error())
		return simulator.OutcomeInvalid
	}
	// The rate limit stands in front of everything else, as a provider's edge does: a charge
	// over it is refused at once, whatever trouble lies behind.
	if s.rateLimit(w, fault) {
		return outcomeRateLimited
	}
	if out, stop := s.injectFault(w, r, fault); stop {
		return out
	}

	key := r.Header.Get("Idempotency-Key")
	if !isToken(key, 255) {
		simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", "Idempotency-Key must be 1 to 255 visible ASCII characters")
		return simulator.OutcomeInvalid
	}
	req, err := decodeCharge(bytes.NewReader(body))
	if err != nil {
		simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return simulator.OutcomeInvalid
	}

	e, c := s.ledger.claim(key, req)
	switch c {
	case claimDone:
		writeResponse(w, e.resp, true)
		return outcomeReplayed
	case claimInFlight:
		simulator.WriteError(w, http.StatusConflict, "idempotency_error", "a request with this Idempotency-Key is still in progress")
		return outcomeConflict
	case claimMismatch:
		simulator.WriteError(w, http.StatusUnprocessableEntity, "idempotency_error", "this Idempotency-Key was used with different parameters")
		return outcomeMismatch
	}

	// A real provider finishes what it started even if the caller hung up, which is why a
	// caller's timeout alone does not relieve a slow provider.
	resp, ch := s.process(context.WithoutCancel(r.Context()), req, fault)
	s.ledger.finish(e, resp, ch)
	out := outcomeSucceeded
	if ch == nil {
		out = outcomeDeclined
	}

	if fault.ResetAfterCharge {
		dropConnection(w)
		return outcomeResetAfterCharge
	}
	writeResponse(w, resp, false)
	return out
}

// process takes a charge's processing time (see work), then charges or declines: it returns
// the response and the charge made, nil for a decline.
func (s *Simulator) process(ctx context.Context, req chargeRequest, fault Fault) (response, *charge) {
	created := s.work(ctx, fault)
	if req.PaymentMethod == declinedMethod {
		return errorResponse(http.StatusPaymentRequired, "card_declined", "Your card was declined."), nil
	}
	ch := charge{
		ID:        "ch_" + rand.Text(),
		Status:    "succeeded",
		Amount:    req.Amount,
		Currency:  req.Currency,
		Reference: req.Reference,
		Created:   created,
	}
	return jsonResponse(http.StatusCreated, ch), &ch
}

// work takes the time drawn for a charge (see latency), under the capacity model (see
// scaledLatency) and with fault's latency added, and returns the charge's creation time:
// when its processing began, as a real provider stamps it when it accepts the request. A
// charge that took long therefore appears in the list after charges created later than it,
// which the ledger walk must not miss. ctx carries no cancellation from the client, only
// values.
func (s *Simulator) work(ctx context.Context, fault Fault) time.Time {
	created := time.Now().UTC().Truncate(time.Microsecond)
	n := int(s.processing.Add(1))
	defer s.processing.Add(-1)
	capacity := s.cfg.Capacity
	if fault.Capacity > 0 {
		capacity = fault.Capacity
	}
	s.inflight.processing(capacity > 0 && n > capacity)
	simulator.Sleep(ctx, scaledLatency(s.latency(fault), n, capacity)+time.Duration(fault.Latency))
	return created
}

// response is a finished answer as the ledger keeps it, so a replay is byte-for-byte identical.
type response struct {
	status int
	body   []byte
}

func jsonResponse(status int, v any) response {
	return response{status: status, body: simulator.EncodeJSON(v)}
}

// errorResponse builds the provider's error body, {"error":{"type":…,"message":…}}.
func errorResponse(status int, typ, message string) response {
	return jsonResponse(status, simulator.ErrorBody(typ, message))
}

func writeResponse(w http.ResponseWriter, resp response, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body) // The client may be gone; there is nobody to tell.
}
