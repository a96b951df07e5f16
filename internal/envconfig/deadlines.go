package envconfig

import "time"

// PaymentBudget reads PAYMENT_BUDGET, checkout's deadline for the
// synchronous charge, over the default d. Checkout bounds its requests by
// it; the worker reads it under the same name and range to check that its
// sweep waits out checkout's longest request (order.Config.LockTTL).
func (r *Reader) PaymentBudget(d time.Duration) time.Duration {
	return r.Duration("PAYMENT_BUDGET", d, 10*time.Millisecond, time.Minute)
}

// TxTimeout reads DB_TX_TIMEOUT, checkout's bound on each transaction, over
// the default d; read by checkout and the worker as PaymentBudget is.
func (r *Reader) TxTimeout(d time.Duration) time.Duration {
	return r.Duration("DB_TX_TIMEOUT", d, 10*time.Millisecond, time.Minute)
}
