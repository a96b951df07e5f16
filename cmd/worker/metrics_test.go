package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
	"github.com/resilientcheckout/checkout/internal/telemetry/telemetrytest"
)

// TestExportsDashboardAndAlertMetrics scrapes a running worker for every
// metric deploy/'s dashboard and alert rules read from it, after it has
// settled a deferred order (job outcomes and failure reasons are series that
// exist only once one happened).
func TestExportsDashboardAndAlertMetrics(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	sim := simtest.Start(t, 0)
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	jobs, err := river.NewClient(riverpgxv5.New(db), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}

	// The provider is down: the checkout flow defers the order to the
	// worker. Its card is one the provider declines once it is back.
	sim.Fault(t, `{"down":true}`)
	payer, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: sim.URL, SecretKey: "sk_test_checkout"}, resilience.DefaultConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	svc := newOrderService(t, db, orderpayment.New(payer))
	res, err := svc.Place(t.Context(), "metrics-1", order.PlaceRequest{
		CustomerID: "cus_1", Currency: "USD", PaymentMethod: "pm_card_chargeDeclined",
		Items: []order.Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 500}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Order.Status, order.StatusPendingPayment; got != want {
		t.Fatalf("order status = %q, want %q", got, want)
	}
	sim.Heal(t)
	// The fallback scheduled the job for when the breaker would probe;
	// make it due now rather than wait for River's scheduler.
	scheduled, err := jobs.JobList(t.Context(), river.NewJobListParams().States(rivertype.JobStateScheduled))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range scheduled.Jobs {
		if _, err := jobs.JobRetry(t.Context(), j.ID); err != nil {
			t.Fatal(err)
		}
	}

	p := process.Start(t, run, []string{"worker"}, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": sim.URL,
	})
	deadline := time.Now().Add(20 * time.Second)
	for orderStatus(t, db, res.Order.ID.String()) != order.StatusPaymentFailed {
		if time.Now().After(deadline) {
			t.Fatalf("order not settled by the worker within 20 s\nlogs:\n%s", p.Logs())
		}
		time.Sleep(50 * time.Millisecond) // polling another process's progress
	}

	telemetrytest.CheckExported(t, "worker", p.URL+"/metrics")
}

func orderStatus(t *testing.T, db *pgxpool.Pool, id string) order.Status {
	t.Helper()
	var s order.Status
	if err := db.QueryRow(t.Context(), `SELECT status FROM orders WHERE id = $1`, id).Scan(&s); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return s
}
