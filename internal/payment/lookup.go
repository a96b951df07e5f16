package payment

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Lookup asks which PaymentIntents the provider holds for an order: those its attempts
// could have created, so those created from CreatedFrom to CreatedTo. The window is the
// caller's to choose from what it knows of the order's attempts (order.Resolve).
type Lookup struct {
	OrderID     string
	CreatedFrom time.Time
	CreatedTo   time.Time
}

// lookupPage is how many PaymentIntents one page of a lookup asks for: the list's largest
// page, so a lookup's window of three minutes (order.LookupFor's shortest at the defaults) at
// 40 orders a second is 72 pages.
const lookupPage = 100

// FindCharges answers l from the PaymentIntents list (see ListCharges), page by page: the
// order's succeeded PaymentIntents, oldest first. None gives an empty slice and a nil error,
// and none succeeded while one is processing or requires_action gives ErrPending. Receipts
// found this way have Replayed false.
//
// The lookup turns an ambiguous charge attempt (a timeout, a lost response, a 409, a 5xx)
// into a certain outcome, and it still works once the provider has forgotten the order's
// idempotency key. It reads the list, never the search endpoint: Stripe's search lags
// behind writes (under a minute, up to an hour in an outage), so it could say "none" for an
// order it charged. Nor does it replay the create, which after the key is forgotten would
// charge again. It changes nothing at the provider, so it is always safe to retry.
//
// A failure is an *Error wrapped with the order id, classified as a list's. An error never
// means "not charged": a failed lookup proves nothing.
func (c *Client) FindCharges(ctx context.Context, l Lookup) ([]Receipt, error) {
	return findCharges(ctx, l, c.ListCharges)
}

// FindCharges looks up the order's successful charges (see Client.FindCharges) through
// the same stack as Charge, page by page, and so shares its breaker and bulkhead: a
// provider outage takes the lookup down with the charges, and a lookup takes a slot a
// charge could have used. Besides Client.FindCharges's errors it may return the stack's
// refusals, as Charge.
func (p *Protected) FindCharges(ctx context.Context, l Lookup) ([]Receipt, error) {
	return findCharges(ctx, l, func(ctx context.Context, q ListQuery) (ChargePage, error) {
		return do(ctx, p, func(ctx context.Context) (ChargePage, error) { return p.client.ListCharges(ctx, q) })
	})
}

func findCharges(ctx context.Context, l Lookup, list func(context.Context, ListQuery) (ChargePage, error)) ([]Receipt, error) {
	var (
		receipts []Receipt
		pending  string
	)
	q := ListQuery{CreatedGTE: l.CreatedFrom, CreatedLTE: l.CreatedTo, Limit: lookupPage}
	for {
		page, err := list(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("find charges of order %s: %w", l.OrderID, err)
		}
		for _, ch := range page.Charges {
			if ch.Reference == l.OrderID {
				receipts = append(receipts, Receipt{ChargeID: ch.ID, Amount: ch.Amount, Currency: ch.Currency})
			}
		}
		for _, ch := range page.Pending {
			if ch.Reference == l.OrderID {
				pending = ch.ID
			}
		}
		if !page.HasMore {
			break
		}
		q.StartingAfter = page.Cursor
	}
	if len(receipts) == 0 && pending != "" {
		return nil, fmt.Errorf("find charges of order %s: %w", l.OrderID,
			&Error{Kind: ErrPending, PaymentIntent: pending, lookup: true})
	}
	slices.Reverse(receipts) // the list is newest first
	return receipts, nil
}

// Probe asks the provider a question that changes nothing there: the newest PaymentIntent.
// The resilience stack sends it before a charge that would go out while every slot is held
// for calls a hung provider may still be working on (resilience.Options.Probe), so that a
// provider still hanging holds a read rather than a customer's payment. Any trustworthy
// answer is a success; it fails as ListCharges does.
func (c *Client) Probe(ctx context.Context) error {
	_, err := c.ListCharges(ctx, ListQuery{Limit: 1})
	return err
}
