package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ListQuery selects a page of the provider's charge list: charges created
// from CreatedGTE to CreatedLTE (both inclusive, either may be zero for no
// bound), after the charge StartingAfter (the last one of the previous
// page), at most Limit (1 to 100).
type ListQuery struct {
	CreatedGTE    time.Time
	CreatedLTE    time.Time
	StartingAfter string
	Limit         int
}

// ListedCharge is one successful charge of the provider's list.
type ListedCharge struct {
	ID        string
	Reference string // the order id the charge was made for
	Amount    int64
	Currency  string
	Created   time.Time
}

// ChargePage is one page of the charge list, in the provider's order.
type ChargePage struct {
	Charges []ListedCharge
	HasMore bool
}

// ListCharges reads one page of the provider's charge list
// (GET /v1/charges?created_gte=…&created_lte=…&limit=…&starting_after=…): its ledger,
// which the worker walks to find charges that no paid order accounts for
// (docs/design.md, "Provider protocol"). Like the lookup it changes nothing
// at the provider, so it is always safe to retry. A failure is an *Error:
// ErrPermanent for 400 and 422 (among them a cursor the provider does not
// know), ErrTransient for anything else, including an answer that cannot be
// trusted.
func (c *Client) ListCharges(ctx context.Context, q ListQuery) (ChargePage, error) {
	u := *c.chargesURL
	params := url.Values{"limit": {strconv.Itoa(q.Limit)}}
	if !q.CreatedGTE.IsZero() {
		params.Set("created_gte", q.CreatedGTE.UTC().Format(time.RFC3339Nano))
	}
	if !q.CreatedLTE.IsZero() {
		params.Set("created_lte", q.CreatedLTE.UTC().Format(time.RFC3339Nano))
	}
	if q.StartingAfter != "" {
		params.Set("starting_after", q.StartingAfter)
	}
	u.RawQuery = params.Encode()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return ChargePage{}, &Error{Kind: ErrPermanent, Err: fmt.Errorf("build request: %w", err)}
	}
	httpReq.Header.Set("Accept", "application/json")
	resp, body, err := c.send(httpReq) //nolint:bodyclose // send reads the body and closes it
	if err != nil {
		return ChargePage{}, fmt.Errorf("list charges: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return ChargePage{}, fmt.Errorf("list charges: %w", newStatusError(lookupKindOf(resp.StatusCode), resp, body))
	}
	page, err := parseChargePage(resp.StatusCode, body)
	if err != nil {
		return ChargePage{}, fmt.Errorf("list charges: %w", err)
	}
	return page, nil
}

// listResult is the protocol's 200 body for the charge list.
type listResult struct {
	Data    *[]listedCharge `json:"data"`
	HasMore *bool           `json:"has_more"`
}

type listedCharge struct {
	chargeResult
	Created time.Time `json:"created"`
}

// parseChargePage reads the list's 2xx body. Failed charges, should a
// provider list them, moved no money and are skipped; a charge without an
// id, a reference or a creation time, or not final, makes the page
// untrustworthy: a walk that skipped it could miss a charge for good.
func parseChargePage(status int, body []byte) (ChargePage, error) {
	fail := func(err error) error { return &Error{Kind: ErrTransient, StatusCode: status, Err: err} }
	var res listResult
	if err := json.Unmarshal(body, &res); err != nil {
		return ChargePage{}, fail(fmt.Errorf("decode response: %w", err))
	}
	if res.Data == nil || res.HasMore == nil {
		return ChargePage{}, fail(errors.New("response lacks data or has_more"))
	}
	page := ChargePage{Charges: make([]ListedCharge, 0, len(*res.Data)), HasMore: *res.HasMore}
	for _, ch := range *res.Data {
		switch {
		case ch.ID == "" || ch.Reference == "" || ch.Created.IsZero():
			return ChargePage{}, fail(fmt.Errorf("listed charge %q lacks an id, reference or created time", ch.ID))
		case ch.Status == "failed":
			continue
		case ch.Status != "succeeded":
			return ChargePage{}, fail(fmt.Errorf("listed charge %s has status %q, not a final outcome", ch.ID, ch.Status))
		}
		page.Charges = append(page.Charges, ListedCharge{ID: ch.ID, Reference: ch.Reference, Amount: ch.Amount, Currency: ch.Currency, Created: ch.Created.UTC()})
	}
	return page, nil
}

// ListCharges reads a page of the charge list (see Client.ListCharges)
// through p's stack. The ledger walk has a Protected of its own (see
// NewProtectedClient), not the charges' one: a page of a hundred charges
// is a read of another size and cost than a charge, and a slow page must
// neither count as a slow charge in the charges' breaker (which the fleet
// shares) nor hold a charge's slot.
func (p *Protected) ListCharges(ctx context.Context, q ListQuery) (ChargePage, error) {
	return do(ctx, p, func(ctx context.Context) (ChargePage, error) { return p.client.ListCharges(ctx, q) })
}
