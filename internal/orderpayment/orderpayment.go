// Package orderpayment is the payment client seen as an order.Payer: it
// adapts the payment provider's client (internal/payment, behind its
// resilience policy) to the port the order package charges through. It is
// the only place that knows both: payment knows nothing of orders, and order
// knows no HTTP. cmd/checkout and cmd/worker each wrap their own protected
// client with it.
package orderpayment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/payment"
)

// Payer is a protected payment client seen as an order.Payer.
type Payer struct {
	client *payment.Protected
}

// New wraps client.
func New(client *payment.Protected) *Payer { return &Payer{client: client} }

var _ order.Payer = (*Payer)(nil)

// Charge charges req through the client's policy and tells order what a
// failure certainly means.
func (p *Payer) Charge(ctx context.Context, req order.ChargeRequest) (order.Receipt, error) {
	r, err := p.client.Charge(ctx, payment.ChargeRequest{
		OrderID: req.Reference, Amount: req.Amount, Currency: req.Currency, PaymentMethod: req.PaymentMethod,
	})
	if err != nil {
		return order.Receipt{}, kind(err)
	}
	return order.Receipt{ChargeID: r.ChargeID, Amount: r.Amount, Currency: r.Currency, Replayed: r.Replayed}, nil
}

// FindCharges looks the reference's charges up through the client's policy.
func (p *Payer) FindCharges(ctx context.Context, l order.Lookup) ([]order.Receipt, error) {
	found, err := p.client.FindCharges(ctx, payment.Lookup{OrderID: l.Reference, CreatedFrom: l.CreatedFrom, CreatedTo: l.CreatedTo})
	if err != nil {
		return nil, kind(err)
	}
	receipts := make([]order.Receipt, len(found))
	for i, r := range found {
		receipts[i] = order.Receipt{ChargeID: r.ChargeID, Amount: r.Amount, Currency: r.Currency}
	}
	return receipts, nil
}

// RetryAfter is how long until the client's breaker lets a call through.
func (p *Payer) RetryAfter() time.Duration { return p.client.RetryAfter() }

// kind marks err with the order package's kind of a certain outcome; any
// other error stays an unknown outcome.
func kind(err error) error {
	switch {
	case payment.IsDeclined(err):
		return fmt.Errorf("%w: %w", order.ErrDeclined, err)
	case errors.Is(err, payment.ErrPermanent):
		return fmt.Errorf("%w: %w", order.ErrRejected, err)
	case payment.IsPending(err):
		return fmt.Errorf("%w: %w", order.ErrPending, err)
	case payment.IsRefused(err):
		return fmt.Errorf("%w: %w", order.ErrRefused, err)
	case payment.IsInProgress(err):
		return fmt.Errorf("%w: %w", order.ErrInProgress, err)
	}
	if wait, ok := payment.RetryAfterOf(err); ok {
		return &order.ThrottledError{RetryAfter: wait, Err: err}
	}
	return err
}
