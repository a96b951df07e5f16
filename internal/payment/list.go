package payment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
)

// ListQuery selects a page of the provider's PaymentIntents list: those created from
// CreatedGTE to CreatedLTE (both inclusive, either may be zero for no bound), after the
// PaymentIntent StartingAfter (the previous page's Cursor), at most Limit (1 to 100).
// Stripe compares creation times in whole seconds, so the window sent is widened to them:
// CreatedGTE rounded down, CreatedLTE up. A window read a little wider finds nothing new.
type ListQuery struct {
	CreatedGTE    time.Time
	CreatedLTE    time.Time
	StartingAfter string
	Limit         int
}

// ListedCharge is a PaymentIntent of the list, as the ledger and the lookup see it.
type ListedCharge struct {
	ID        string // the PaymentIntent's id, "pi_…"
	Reference string // its metadata order_id: the order it was made for; empty if none
	Amount    int64
	Currency  string // upper case, as orders store it
	Created   time.Time
}

// ChargePage is one page of the list, newest first as the provider lists it.
type ChargePage struct {
	// Charges are the page's succeeded PaymentIntents: the ones that moved money.
	Charges []ListedCharge
	// Pending are its PaymentIntents that may still move money: processing,
	// requires_action, requires_confirmation, requires_capture. Declined and canceled ones
	// (requires_payment_method, canceled) moved none and are left out.
	Pending []ListedCharge
	// Cursor is the id of the page's last PaymentIntent, whatever its status: where the
	// next page starts (ListQuery.StartingAfter). Empty for an empty page.
	Cursor string
	// HasMore reports that a next page may hold more. The SDK's list iterator keeps the
	// list's has_more to itself, so a full page counts as "maybe more": a window whose
	// size is a multiple of Limit costs one more, empty page.
	HasMore bool
}

// ListCharges reads one page of the provider's PaymentIntents list
// (GET /v1/payment_intents?created[gte]=…&created[lte]=…&limit=…&starting_after=…), a
// strongly consistent read: a PaymentIntent is listed from the moment the provider
// accepted it. The ledger walks it to find charges no paid order accounts for, and the
// lookup reads it to settle an unknown outcome. It changes nothing at the provider, so it
// is always safe to retry. A failure is an *Error: ErrPermanent for a request the provider
// refused (among them a cursor it does not know), ErrTransient for anything else,
// including a page that cannot be trusted.
func (c *Client) ListCharges(ctx context.Context, q ListQuery) (ChargePage, error) {
	page, err := c.listCharges(ctx, q)
	if err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			e.lookup = true // Classify treats a read's 409 apart from a create's
		}
		return ChargePage{}, fmt.Errorf("list payment intents: %w", err)
	}
	return page, nil
}

func (c *Client) listCharges(ctx context.Context, q ListQuery) (ChargePage, error) {
	params := &stripe.PaymentIntentListParams{}
	if !q.CreatedGTE.IsZero() || !q.CreatedLTE.IsZero() {
		params.CreatedRange = &stripe.RangeQueryParams{}
		if !q.CreatedGTE.IsZero() {
			params.CreatedRange.GreaterThanOrEqual = q.CreatedGTE.Unix()
		}
		if !q.CreatedLTE.IsZero() {
			params.CreatedRange.LesserThanOrEqual = ceilUnix(q.CreatedLTE)
		}
	}
	params.Limit = stripe.Int64(int64(q.Limit))
	if q.StartingAfter != "" {
		params.StartingAfter = stripe.String(q.StartingAfter)
	}
	// One page per call: the iterator would page on by itself, inside one attempt of the
	// resilience stack and under its one deadline.
	params.Single = true
	var page ChargePage
	n := 0
	for pi, err := range c.sc.V1PaymentIntents.List(ctx, params) {
		if err != nil {
			return ChargePage{}, classify(err)
		}
		n++
		if pi.ID == "" || pi.Created == 0 {
			return ChargePage{}, &Error{Kind: ErrTransient, Err: fmt.Errorf("listed PaymentIntent %q lacks an id or a creation time", pi.ID)}
		}
		page.Cursor = pi.ID
		listed := ListedCharge{ID: pi.ID, Reference: pi.Metadata[metadataOrderID], Amount: pi.Amount,
			Currency: strings.ToUpper(string(pi.Currency)), Created: time.Unix(pi.Created, 0).UTC()}
		switch pi.Status {
		case stripe.PaymentIntentStatusSucceeded:
			page.Charges = append(page.Charges, listed)
		case stripe.PaymentIntentStatusRequiresPaymentMethod, stripe.PaymentIntentStatusCanceled:
		default:
			page.Pending = append(page.Pending, listed)
		}
	}
	page.HasMore = n == q.Limit
	return page, nil
}

// ceilUnix is t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	if t.Equal(time.Unix(t.Unix(), 0)) {
		return t.Unix()
	}
	return t.Unix() + 1
}

// ListCharges reads a page of the list (see Client.ListCharges) through p's stack. The
// ledger walk has a Protected of its own (see NewProtectedClient), not the charges' one: a
// page of a hundred PaymentIntents is a read of another size and cost than a charge, and a
// slow page must neither count as a slow charge in the charges' breaker (which the fleet
// shares) nor hold a charge's slot.
func (p *Protected) ListCharges(ctx context.Context, q ListQuery) (ChargePage, error) {
	return do(ctx, p, func(ctx context.Context) (ChargePage, error) { return p.client.ListCharges(ctx, q) })
}
