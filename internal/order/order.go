// Package order owns orders: their states, the rules a new order must meet,
// their storage in PostgreSQL (the order row, the Idempotency-Key that
// created it, and the first answer that request got), how a charge outcome
// settles an order (charge.go, used by the API flow and the worker alike),
// and the checkout flow (Service.Place) that saves an order, tries to charge
// it synchronously and, when the payment provider is unavailable, leaves it
// to the worker (the charge_order job) instead of failing the customer.
//
// It returns domain values only; internal/api renders them as HTTP, the
// first time and on replay, and internal/worker runs the jobs.
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

// UnsettledStatuses are the states that still await a charge outcome: the
// worker's backlog. unsettledSQL is the same list as SQL; it is spelled out
// as a literal (not a parameter) so the planner matches it against the
// partial index orders_unsettled_idx, whose predicate is this list.
var UnsettledStatuses = []Status{StatusPending, StatusPendingPayment}

const unsettledSQL = `('pending', 'pending_payment')`

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
	// LastAttemptAt is when the latest charge attempt for the order began
	// (the API's is the order's creation). It is a bookkeeping field of the
	// worker's, not part of the resource.
	LastAttemptAt time.Time `json:"-"`
}
