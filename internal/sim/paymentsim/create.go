package paymentsim

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// maxBodyBytes bounds a create's or an admin request's body; a real create is a few hundred
// bytes.
const maxBodyBytes = 16 << 10

// handleCreateIntent serves POST /v1/payment_intents: the key check, the rate limit, then
// faults (they stand for trouble in front of the provider's ledger), then validation, then
// the idempotency ledger, then processing.
func (s *Simulator) handleCreateIntent() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		fault := s.srv.Faults.Active(start)
		done := s.inflight.add(fault != Fault{})
		outcome := s.serveCreateIntent(w, r, fault)
		done()
		s.metrics.Observe(outcome, time.Since(start))
	}
}

// serveCreateIntent answers one create under fault, the faults active as it arrived.
func (s *Simulator) serveCreateIntent(w http.ResponseWriter, r *http.Request, fault Fault) outcome {
	// Read the whole body first: net/http notices a client hanging up (and cancels
	// r.Context) only once the body has been consumed, and a hung request must notice.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeInvalid(w, "", "read body: "+err.Error())
		return simulator.OutcomeInvalid
	}
	if !authorized(w, r) {
		return simulator.OutcomeInvalid
	}
	// The rate limit stands in front of everything else, as a provider's edge does: a create
	// over it is refused at once, whatever trouble lies behind.
	if s.rateLimit(w, fault) {
		return outcomeRateLimited
	}
	if out, stop := s.injectFault(w, r, fault); stop {
		return out
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		writeInvalid(w, "", "the body must be form-encoded (application/x-www-form-urlencoded), not "+ct)
		return simulator.OutcomeInvalid
	}
	req, perr := decodeIntentRequest(body)
	if perr != nil {
		writeParamError(w, perr)
		return simulator.OutcomeInvalid
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		key = "sim-" + rand.Text() // Stripe takes a write without a key as a request of its own
	}
	if !isToken(key, 255) {
		writeInvalid(w, "", "Idempotency-Key must be 1 to 255 visible ASCII characters")
		return simulator.OutcomeInvalid
	}

	e, c := s.ledger.claim(key, req)
	switch c {
	case claimDone:
		writeResponse(w, e.resp, true)
		return outcomeReplayed
	case claimInFlight:
		writeResponse(w, stripeErrorResponse(http.StatusConflict, stripeError{Type: "invalid_request_error", Code: "idempotency_key_in_use",
			Message: "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): " + key + ". Please try again later."}), false)
		return outcomeConflict
	case claimMismatch:
		writeResponse(w, stripeErrorResponse(http.StatusBadRequest, stripeError{Type: "idempotency_error",
			Message: "Keys for idempotent requests can only be used with the same parameters they were first used with."}), false)
		return outcomeMismatch
	}

	// A real provider finishes what it started even if the caller hung up, which is why a
	// caller's timeout alone does not relieve a slow provider.
	resp, pi := s.processIntent(context.WithoutCancel(r.Context()), req, fault)
	s.ledger.finish(e, resp, pi)
	out := outcomeSucceeded
	switch pi.Status {
	case "requires_payment_method":
		out = outcomeDeclined
	case "requires_action":
		out = outcomeRequiresAction
	}
	if fault.ResetAfterCharge {
		dropConnection(w)
		return outcomeResetAfterCharge
	}
	writeResponse(w, resp, false)
	return out
}

// processIntent takes a charge's processing time (see work), then confirms the intent with
// its payment method: a decline leaves it requires_payment_method and answers 402 with the
// intent in the error, as Stripe does; a card asking for authentication leaves it
// requires_action; any other succeeds with a charge, the intent's latest_charge.
func (s *Simulator) processIntent(ctx context.Context, req intentRequest, fault Fault) (response, intent) {
	created := s.work(ctx, fault)
	pi := intent{
		ID: "pi_" + rand.Text(), Amount: req.Amount, Currency: req.Currency, PaymentMethod: req.PaymentMethod,
		OrderID: req.OrderID, Created: created,
	}
	switch req.PaymentMethod {
	case declinedMethod:
		pi.Status = "requires_payment_method"
		j := pi.json()
		return stripeErrorResponse(http.StatusPaymentRequired, stripeError{Type: "card_error", Code: "card_declined",
			DeclineCode: "generic_decline", Message: "Your card was declined.", Param: "payment_method", PaymentIntent: &j}), pi
	case authenticationRequiredMethod:
		pi.Status = "requires_action"
		return jsonResponse(http.StatusOK, pi.json()), pi
	}
	pi.Status, pi.LatestCharge = "succeeded", "ch_"+rand.Text()
	return jsonResponse(http.StatusOK, pi.json()), pi
}

// work takes the time drawn for a charge (see latency), under the capacity model (see
// scaledLatency) and with fault's latency added, and returns the PaymentIntent's creation
// time: when its processing began, as a real provider stamps it when it accepts the
// request. An intent that took long therefore appears in the list after intents created
// later than it, which the ledger walk must not miss. ctx carries no cancellation from the
// client, only values.
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

func writeResponse(w http.ResponseWriter, resp response, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body) // The client may be gone; there is nobody to tell.
}
