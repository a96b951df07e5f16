// Package order owns orders: their states, the rules a new order must meet,
// their storage in PostgreSQL, and the checkout flow that saves an order,
// tries to charge it synchronously and, when the payment provider is
// unavailable, leaves it to the worker (the charge_order job) instead of
// failing the customer.
package order

import (
	"time"

	"github.com/google/uuid"
)

// Status is an order's state. The database's CHECK constraint holds exactly
// these names.
type Status string

const (
	// StatusPending: saved, payment in flight (synchronous attempt running,
	// or the process died during it and the worker will take over).
	StatusPending Status = "pending"
	// StatusPendingPayment: the provider was unavailable; the worker charges
	// the order once it recovers.
	StatusPendingPayment Status = "pending_payment"
	// StatusPaid: charged exactly once; ChargeID names the charge.
	StatusPaid Status = "paid"
	// StatusPaymentFailed: declined, or the worker gave up; FailureReason says which.
	StatusPaymentFailed Status = "payment_failed"
)

// Terminal reports whether no further transition can happen.
func (s Status) Terminal() bool { return s == StatusPaid || s == StatusPaymentFailed }

// Failure reasons stored in failure_reason.
const (
	ReasonCardDeclined        = "card_declined"
	ReasonProviderUnavailable = "provider_unavailable"
	ReasonProviderRejected    = "provider_rejected"
)

// Item is one order line. Prices are integer minor units (cents).
type Item struct {
	SKU       string `json:"sku"`
	Quantity  int64  `json:"quantity"`
	UnitPrice int64  `json:"unit_price"`
}

// Order is the API's order resource and the orders table's row.
type Order struct {
	ID            uuid.UUID `json:"id"`
	Status        Status    `json:"status"`
	CustomerID    string    `json:"customer_id"`
	Currency      string    `json:"currency"`
	PaymentMethod string    `json:"-"` // a payment token: stored, never echoed
	Items         []Item    `json:"items"`
	Total         int64     `json:"total"`
	ChargeID      string    `json:"charge_id,omitempty"`
	FailureReason string    `json:"failure_reason,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}
