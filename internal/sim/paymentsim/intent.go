package paymentsim

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// The PaymentIntents subset of Stripe's API (docs/design.md, "Provider protocol"):
//
//	POST /v1/payment_intents                 create and confirm (confirm=true), or create only
//	POST /v1/payment_intents/{id}/confirm    confirm an intent created unconfirmed
//	GET  /v1/payment_intents/{id}            retrieve
//	GET  /v1/payment_intents?created[gte]=…  list, newest first
//	GET  /v1/payment_intents/search?query=…  search by metadata['order_id'], lagging (SearchLag)
//
// Requests are form-encoded with Stripe's nested keys (metadata[order_id]) and authenticated
// with a test secret key; answers and errors are Stripe's JSON. Parameters outside the subset
// are refused with 400, as Stripe refuses a parameter it does not know: a client sending one
// has a bug this simulator should surface, not hide.

// Test payment methods, named as Stripe's test mode names them. Any other payment method
// succeeds, as pm_card_visa does.
const (
	// declinedMethod is always declined: the PaymentIntent is left requires_payment_method.
	declinedMethod = "pm_card_chargeDeclined"
	// authenticationRequiredMethod leaves the PaymentIntent in requires_action: the card asks
	// for 3-D Secure, which only the customer can complete.
	authenticationRequiredMethod = "pm_card_authenticationRequired"
)

// intentRequest is a create's or a confirm's parameters. Two requests with one
// Idempotency-Key must carry equal intentRequests, so the type stays comparable.
type intentRequest struct {
	Amount        int64
	Currency      string
	PaymentMethod string // a confirm's is optional: empty keeps the intent's
	Types         string // payment_method_types, joined by commas
	OrderID       string
	Confirm       bool   // a create's confirm; always true for a confirm
	Intent        string // the id of the intent a confirm confirms; empty for a create
}

// intentJSON is a PaymentIntent as Stripe renders it, the fields of the subset.
type intentJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountReceived     int64             `json:"amount_received"`
	Currency           string            `json:"currency"`
	Status             string            `json:"status"`
	PaymentMethod      string            `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Metadata           map[string]string `json:"metadata"`
	Created            int64             `json:"created"`
	LatestCharge       *string           `json:"latest_charge"`
	CaptureMethod      string            `json:"capture_method"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Livemode           bool              `json:"livemode"`
}

func (pi intent) json() intentJSON {
	j := intentJSON{
		ID: pi.ID, Object: "payment_intent", Amount: pi.Amount, Currency: pi.Currency, Status: pi.Status,
		PaymentMethod: pi.PaymentMethod, PaymentMethodTypes: []string{"card"}, Metadata: map[string]string{},
		Created: pi.Created.Unix(), CaptureMethod: "automatic", ConfirmationMethod: "automatic",
	}
	if pi.OrderID != "" {
		j.Metadata["order_id"] = pi.OrderID
	}
	if pi.LatestCharge != "" {
		j.LatestCharge = &pi.LatestCharge
		j.AmountReceived = pi.Amount
	}
	return j
}

// intentList is the body of a list answer.
type intentList struct {
	Object  string       `json:"object"`
	URL     string       `json:"url"`
	HasMore bool         `json:"has_more"`
	Data    []intentJSON `json:"data"`
}

// stripeError is Stripe's error object; param names the offending parameter.
type stripeError struct {
	Type          string      `json:"type"`
	Code          string      `json:"code,omitempty"`
	DeclineCode   string      `json:"decline_code,omitempty"`
	Message       string      `json:"message"`
	Param         string      `json:"param,omitempty"`
	PaymentIntent *intentJSON `json:"payment_intent,omitempty"`
}

func stripeErrorResponse(status int, e stripeError) response {
	return jsonResponse(status, struct {
		Error stripeError `json:"error"`
	}{e})
}

func writeInvalid(w http.ResponseWriter, param, message string) {
	writeParamError(w, &paramError{code: "parameter_invalid", param: param, msg: message})
}

// paramError is a request Stripe would refuse, with its code (parameter_unknown,
// parameter_missing, parameter_invalid) and the parameter it names.
type paramError struct{ code, param, msg string }

func (e *paramError) Error() string { return e.msg }

func unknown(key string) *paramError {
	return &paramError{"parameter_unknown", key, "Received unknown parameter: " + key}
}

func missing(key string) *paramError {
	return &paramError{"parameter_missing", key, "Missing required param: " + key + "."}
}

func invalid(key, format string, args ...any) *paramError {
	return &paramError{"parameter_invalid", key, fmt.Sprintf(format, args...)}
}

func writeParamError(w http.ResponseWriter, e *paramError) {
	writeResponse(w, stripeErrorResponse(http.StatusBadRequest, stripeError{
		Type: "invalid_request_error", Code: e.code, Param: e.param, Message: e.msg}), false)
}

// authorized checks the secret key as Stripe does, answering 401 without one. Any test-mode
// key is accepted: the simulator has no accounts.
func authorized(w http.ResponseWriter, r *http.Request) bool {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && strings.HasPrefix(key, "sk_test_") && len(key) > len("sk_test_") {
		return true
	}
	writeResponse(w, stripeErrorResponse(http.StatusUnauthorized, stripeError{
		Type: "invalid_request_error", Message: "Invalid API Key provided: the simulator takes any sk_test_… key as a Bearer token."}), false)
	return false
}

var (
	currencyRE = regexp.MustCompile(`^[a-z]{3}$`)
	typesKeyRE = regexp.MustCompile(`^payment_method_types\[\d*\]$`)
)

// isToken reports whether s is 1 to maxLen characters of visible ASCII (0x21–0x7E), the
// alphabet of idempotency keys, payment methods and order ids.
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

// decodeIntentRequest reads a create's form-encoded body (see parseIntentRequest).
func decodeIntentRequest(body []byte) (intentRequest, *paramError) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return intentRequest{}, invalid("", "malformed form body: %v", err)
	}
	return parseIntentRequest(form)
}

// parseIntentRequest reads a create's form strictly: an unknown or repeated parameter is an
// error naming it, as Stripe's "Received unknown parameter".
func parseIntentRequest(form url.Values) (intentRequest, *paramError) {
	var req intentRequest
	var types []string
	for key, vals := range form {
		if len(vals) != 1 {
			return req, invalid(key, "parameter %s given %d times", key, len(vals))
		}
		v := vals[0]
		switch {
		case key == "amount":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return req, invalid(key, "amount must be a positive integer of minor units")
			}
			req.Amount = n
		case key == "currency":
			if !currencyRE.MatchString(v) {
				return req, invalid(key, "currency must be three lowercase letters")
			}
			req.Currency = v
		case key == "payment_method":
			if !isToken(v, 64) {
				return req, invalid(key, "payment_method must be 1 to 64 visible ASCII characters")
			}
			req.PaymentMethod = v
		case key == "confirm":
			confirm, err := strconv.ParseBool(v)
			if err != nil || v != strconv.FormatBool(confirm) {
				return req, invalid(key, "confirm must be true or false")
			}
			req.Confirm = confirm
		case typesKeyRE.MatchString(key):
			types = append(types, v)
		case key == "metadata[order_id]":
			if !isToken(v, 500) {
				return req, invalid(key, "metadata[order_id] must be 1 to 500 visible ASCII characters")
			}
			req.OrderID = v
		default:
			return req, unknown(key)
		}
	}
	switch {
	case req.Amount == 0:
		return req, missing("amount")
	case req.Currency == "":
		return req, missing("currency")
	case req.PaymentMethod == "":
		return req, missing("payment_method")
	}
	for _, t := range types {
		if t != "card" {
			return req, invalid("payment_method_types", "payment method type %q is not supported", t)
		}
	}
	req.Types = strings.Join(types, ",")
	return req, nil
}

// decodeConfirmRequest reads a confirm of the intent id: its form may name another
// payment_method, and nothing else in the subset.
func decodeConfirmRequest(id string, body []byte) (intentRequest, *paramError) {
	req := intentRequest{Intent: id, Confirm: true}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return req, invalid("", "malformed form body: %v", err)
	}
	for key, vals := range form {
		switch {
		case key != "payment_method":
			return req, unknown(key)
		case len(vals) != 1:
			return req, invalid(key, "parameter %s given %d times", key, len(vals))
		case !isToken(vals[0], 64):
			return req, invalid(key, "payment_method must be 1 to 64 visible ASCII characters")
		}
		req.PaymentMethod = vals[0]
	}
	return req, nil
}

// handleRetrieveIntent serves GET /v1/payment_intents/{id}: the intent as it is now, 404 if
// the provider holds none by that id.
func (s *Simulator) handleRetrieveIntent() http.HandlerFunc {
	return s.read(func(w http.ResponseWriter, r *http.Request) outcome {
		if len(r.URL.Query()) != 0 {
			writeInvalid(w, "", "retrieve takes no query parameters in the simulator")
			return simulator.OutcomeInvalid
		}
		pi, ok := s.ledger.getIntent(r.PathValue("id"))
		if !ok {
			writeResponse(w, stripeErrorResponse(http.StatusNotFound, stripeError{Type: "invalid_request_error", Code: "resource_missing",
				Param: "intent", Message: "No such payment_intent: '" + r.PathValue("id") + "'"}), false)
			return simulator.OutcomeInvalid
		}
		simulator.WriteJSON(w, http.StatusOK, pi.json())
		return outcomeFound
	})
}

// handleListIntents serves GET /v1/payment_intents: created[gte], created[lte] (Unix seconds),
// limit (1 to 100, default 10), starting_after or ending_before; newest first.
func (s *Simulator) handleListIntents() http.HandlerFunc {
	return s.read(func(w http.ResponseWriter, r *http.Request) outcome {
		q, perr := parseIntentQuery(r.URL.Query())
		if perr != nil {
			writeParamError(w, perr)
			return simulator.OutcomeInvalid
		}
		page, more, err := s.ledger.listIntents(q)
		if err != nil {
			cursor := q.startingAfter + q.endingBefore
			writeResponse(w, stripeErrorResponse(http.StatusBadRequest, stripeError{Type: "invalid_request_error", Code: "resource_missing",
				Message: "No such payment_intent: '" + cursor + "'"}), false)
			return simulator.OutcomeInvalid
		}
		list := intentList{Object: "list", URL: "/v1/payment_intents", HasMore: more, Data: make([]intentJSON, len(page))}
		for i, pi := range page {
			list.Data[i] = pi.json()
		}
		simulator.WriteJSON(w, http.StatusOK, list)
		return outcomeFound
	})
}

var searchQueryRE = regexp.MustCompile(`^metadata\['order_id'\]:'([^']+)'$`)

// handleSearchIntents serves GET /v1/payment_intents/search?query=metadata['order_id']:'<id>':
// the order's intents, newest first, from an index that sees an intent only SearchLag after
// it was recorded, as Stripe's search lags writes (under a minute, up to an hour in an
// outage). It is here to show why the lookup reads the list instead; the client never calls
// it.
func (s *Simulator) handleSearchIntents() http.HandlerFunc {
	return s.read(func(w http.ResponseWriter, r *http.Request) outcome {
		query := r.URL.Query()
		for key := range query {
			if key != "query" {
				writeParamError(w, unknown(key))
				return simulator.OutcomeInvalid
			}
		}
		m := searchQueryRE.FindStringSubmatch(query.Get("query"))
		if m == nil {
			writeInvalid(w, "query", "the simulator searches by metadata['order_id']:'<id>' only")
			return simulator.OutcomeInvalid
		}
		found := s.ledger.searchIntents(m[1], time.Now().Add(-s.cfg.SearchLag))
		result := struct {
			Object   string       `json:"object"`
			URL      string       `json:"url"`
			HasMore  bool         `json:"has_more"`
			NextPage *string      `json:"next_page"`
			Data     []intentJSON `json:"data"`
		}{Object: "search_result", URL: "/v1/payment_intents/search", Data: make([]intentJSON, len(found))}
		for i, pi := range found {
			result.Data[i] = pi.json()
		}
		simulator.WriteJSON(w, http.StatusOK, result)
		return outcomeFound
	})
}

func parseIntentQuery(query url.Values) (intentQuery, *paramError) {
	q := intentQuery{limit: 10}
	for key, vals := range query {
		if len(vals) != 1 {
			return q, invalid(key, "parameter %s given %d times", key, len(vals))
		}
		v := vals[0]
		switch key {
		case "created[gte]", "created[lte]":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return q, invalid(key, "%s must be a Unix time in seconds", key)
			}
			if key == "created[gte]" {
				q.createdGTE = &n
			} else {
				q.createdLTE = &n
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100 {
				return q, invalid(key, "limit must be 1 to 100")
			}
			q.limit = n
		case "starting_after":
			q.startingAfter = v
		case "ending_before":
			q.endingBefore = v
		default:
			return q, unknown(key)
		}
	}
	if q.startingAfter != "" && q.endingBefore != "" {
		return q, invalid("ending_before", "starting_after and ending_before cannot both be given")
	}
	return q, nil
}

// read wraps a read of the intents (retrieve, list, search) in what every read gets: the key
// check, the faults, the simulated latency, and the metrics. An outage of a real provider
// takes its reads down with its creates, so the same faults apply, read once as the request
// arrives: refused connections, down, hang, error rate and latency; reset_after_charge
// concerns creates only, and a read is answered. Reads are not rate limited (see
// chargeLimiter). A read changes nothing, so one whose client has gone is not finished.
func (s *Simulator) read(serve func(http.ResponseWriter, *http.Request) outcome) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fault := s.srv.Faults.Active(time.Now())
		if fault != (Fault{}) {
			s.inflight.readDuringFault()
		}
		out := func() outcome {
			if !authorized(w, r) {
				return simulator.OutcomeInvalid
			}
			if out, stop := s.injectFault(w, r, fault); stop {
				return out
			}
			simulator.Sleep(r.Context(), s.latency(fault)+time.Duration(fault.Latency))
			if r.Context().Err() != nil {
				return simulator.OutcomeAbandoned
			}
			return serve(w, r)
		}()
		s.metrics.observeRead(out)
	}
}
