package paymentsim

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// maxBodyBytes bounds a create's or an admin request's body; a real create is a few hundred
// bytes.
const maxBodyBytes = 16 << 10

// handleCreateIntent serves POST /v1/payment_intents: a create, confirmed (confirm=true) or
// not.
func (s *Simulator) handleCreateIntent() http.HandlerFunc {
	return s.write(func(r *http.Request, body []byte) (intentRequest, *paramError) {
		return decodeIntentRequest(body)
	})
}

// handleConfirmIntent serves POST /v1/payment_intents/{id}/confirm: the charge of an intent
// created unconfirmed, or declined and given another payment method.
func (s *Simulator) handleConfirmIntent() http.HandlerFunc {
	return s.write(func(r *http.Request, body []byte) (intentRequest, *paramError) {
		return decodeConfirmRequest(r.PathValue("id"), body)
	})
}

// write wraps a request that writes an intent (a create, a confirm) in what every write
// gets: the key check, the rate limit, then faults (they stand for trouble in front of the
// provider's ledger), then validation, then the idempotency ledger, then processing, and
// the charge metrics.
func (s *Simulator) write(decode func(*http.Request, []byte) (intentRequest, *paramError)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		fault := s.srv.Faults.Active(start)
		done := s.inflight.add(fault != Fault{})
		outcome := s.serveWrite(w, r, fault, decode)
		done()
		s.metrics.Observe(outcome, time.Since(start))
	}
}

// serveWrite answers one create or confirm under fault, the faults active as it arrived.
func (s *Simulator) serveWrite(w http.ResponseWriter, r *http.Request, fault Fault, decode func(*http.Request, []byte) (intentRequest, *paramError)) outcome {
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
	// The rate limit stands in front of everything else, as a provider's edge does: a write
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
	req, perr := decode(r, body)
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

	e, c, pi, err := s.ledger.claim(key, req)
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
	case claimRefused:
		return writeConfirmRefusal(w, req.Intent, err)
	}

	// A real provider finishes what it started even if the caller hung up, which is why a
	// caller's timeout alone does not relieve a slow provider.
	resp, pi := s.processIntent(context.WithoutCancel(r.Context()), pi, req.Confirm, fault)
	s.ledger.finish(e, resp, pi)
	out := outcomeSucceeded
	switch pi.Status {
	case "requires_payment_method":
		out = outcomeDeclined
	case "requires_action":
		out = outcomeRequiresAction
	case "requires_confirmation":
		out = outcomeRequiresConfirmation
	}
	if fault.ResetAfterCharge {
		dropConnection(w)
		return outcomeResetAfterCharge
	}
	writeResponse(w, resp, false)
	return out
}

// writeConfirmRefusal answers a confirm that the state of its intent refused (see
// intentLog.beginConfirm) as Stripe does.
func writeConfirmRefusal(w http.ResponseWriter, id string, err error) outcome {
	if state, ok := errors.AsType[*unexpectedStateError](err); ok {
		j := state.intent.json()
		writeResponse(w, stripeErrorResponse(http.StatusBadRequest, stripeError{Type: "invalid_request_error", Code: "payment_intent_unexpected_state",
			Message: "You cannot confirm this PaymentIntent because it has a status of " + state.intent.Status + ".", PaymentIntent: &j}), false)
		return simulator.OutcomeInvalid
	}
	if errors.Is(err, errIntentLocked) {
		writeResponse(w, stripeErrorResponse(http.StatusTooManyRequests, stripeError{Type: "invalid_request_error", Code: "lock_timeout",
			Message: "This object cannot be accessed right now because another API request or Stripe process is currently accessing it."}), false)
		return outcomeConflict
	}
	writeResponse(w, stripeErrorResponse(http.StatusNotFound, stripeError{Type: "invalid_request_error", Code: "resource_missing",
		Param: "intent", Message: "No such payment_intent: '" + id + "'"}), false)
	return simulator.OutcomeInvalid
}

// processIntent takes a write's processing time and leaves pi as it ends. Unconfirmed, pi
// is a new intent that moves no money: it takes a request's processing time, as a read
// does, outside the capacity model, and is left requires_confirmation. Confirmed, it
// takes a charge's processing time (see work), then is confirmed with its payment method: a
// decline leaves it requires_payment_method and answers 402 with the intent in the error,
// as Stripe does; a card asking for authentication leaves it requires_action; any other
// succeeds with a charge, the intent's latest_charge.
func (s *Simulator) processIntent(ctx context.Context, pi intent, confirm bool, fault Fault) (response, intent) {
	if !confirm {
		simulator.Sleep(ctx, s.latency(fault)+time.Duration(fault.Latency))
		pi.Status = "requires_confirmation"
		return jsonResponse(http.StatusOK, pi.json()), pi
	}
	s.work(ctx, fault)
	switch pi.PaymentMethod {
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
// scaledLatency) and with fault's latency added. ctx carries no cancellation from the
// client, only values.
func (s *Simulator) work(ctx context.Context, fault Fault) {
	n := int(s.processing.Add(1))
	defer s.processing.Add(-1)
	capacity := s.cfg.Capacity
	if fault.Capacity > 0 {
		capacity = fault.Capacity
	}
	s.inflight.processing(capacity > 0 && n > capacity)
	simulator.Sleep(ctx, scaledLatency(s.latency(fault), n, capacity)+time.Duration(fault.Latency))
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
