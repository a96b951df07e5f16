package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// FindCharges asks the provider which successful charges it holds for an order, by the
// order's reference (GET /v1/charges?reference=<order id>), and returns them oldest first;
// an order never charged gives an empty slice and a nil error. Receipts found this way have
// Replayed false.
//
// The lookup turns an ambiguous charge attempt (a timeout, a lost response, a 409, a 5xx)
// into a certain outcome, and it still works once the provider
// has forgotten the order's idempotency key: the provider answers from its record of charges.
// It changes nothing at the provider, so it is always safe to retry.
//
// A failure is an *Error wrapped with the order id, classified as for Charge except that a
// lookup is never declined: ErrPermanent for 400 and 422 (our request is wrong), ErrTransient
// for anything else, including an answer that cannot be trusted (unparseable, a charge for
// another reference, a charge whose outcome is not final). An error never means "not
// charged": a failed lookup proves nothing.
func (c *Client) FindCharges(ctx context.Context, orderID string) ([]Receipt, error) {
	receipts, err := c.findCharges(ctx, orderID)
	if err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			e.lookup = true // Classify treats a lookup's 409 apart from a charge's
		}
		return nil, fmt.Errorf("find charges of order %s: %w", orderID, err)
	}
	return receipts, nil
}

// probeReference is the reference Probe looks up: one no order has (order
// ids are UUIDs), so the answer is an empty list.
const probeReference = "checkout-probe"

// Probe asks the provider a question that changes nothing there: the
// charges of probeReference. The resilience stack sends it before a charge
// that would go out while every slot is held for calls a hung provider may
// still be working on (resilience.Options.Probe), so that a provider still
// hanging holds a lookup rather than a customer's payment. Any trustworthy
// answer is a success; it fails as FindCharges does.
func (c *Client) Probe(ctx context.Context) error {
	_, err := c.FindCharges(ctx, probeReference)
	return err
}

// lookupResult is the protocol's 200 body for a lookup.
type lookupResult struct {
	Data *[]chargeResult `json:"data"`
}

func (c *Client) findCharges(ctx context.Context, orderID string) ([]Receipt, error) {
	u := *c.chargesURL
	u.RawQuery = url.Values{"reference": {orderID}}.Encode()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, &Error{Kind: ErrPermanent, Err: fmt.Errorf("build request: %w", err)}
	}
	httpReq.Header.Set("Accept", "application/json")
	resp, body, err := c.send(httpReq) //nolint:bodyclose // send reads the body and closes it
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, newStatusError(lookupKindOf(resp.StatusCode), resp, body)
	}
	return parseCharges(resp.StatusCode, body, orderID)
}

// parseCharges reads a lookup's 2xx body. The protocol lists successful charges only; a
// provider that lists failed ones as well (as real ones may) has them skipped, since they
// moved no money. Anything else that is not a succeeded charge of this order makes the whole
// answer untrustworthy, and so transient: a charge still in progress may yet succeed, and a
// charge for another reference means the provider answered some other question.
func parseCharges(status int, body []byte, orderID string) ([]Receipt, error) {
	fail := func(err error) error { return &Error{Kind: ErrTransient, StatusCode: status, Err: err} }
	var res lookupResult
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fail(fmt.Errorf("decode response: %w", err))
	}
	if res.Data == nil {
		return nil, fail(errors.New("response has no data list"))
	}
	receipts := make([]Receipt, 0, len(*res.Data))
	for _, ch := range *res.Data {
		switch {
		case ch.ID == "":
			return nil, fail(errors.New("listed charge without an id"))
		case ch.Reference != orderID:
			return nil, fail(fmt.Errorf("listed charge %s is for reference %q", ch.ID, ch.Reference))
		case ch.Status == "failed":
			continue
		case ch.Status != "succeeded":
			return nil, fail(fmt.Errorf("listed charge %s has status %q, not a final outcome", ch.ID, ch.Status))
		}
		receipts = append(receipts, Receipt{ChargeID: ch.ID, Amount: ch.Amount, Currency: ch.Currency})
	}
	return receipts, nil
}
