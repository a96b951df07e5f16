package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/orderpayment"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// TestTwoWorkersDrainBacklogChargingEachOrderOnce places 50 orders while the
// provider is down (the API's fallback leaves them pending_payment), heals
// the provider, and lets two worker processes on one database drain them.
func TestTwoWorkersDrainBacklogChargingEachOrderOnce(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	sim := simtest.Start(t, 20*time.Millisecond)
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)

	sim.Fault(t, `{"down":true}`)
	const n = 50
	placeOrders(t, db, sim.URL, n)
	if got := countOrders(t, db, order.StatusPendingPayment); got != n {
		t.Fatalf("orders pending_payment after the outage = %d, want %d", got, n)
	}

	sim.Reset(t)
	sim.Heal(t)
	healed := time.Now()
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": sim.URL}
	w1 := process.Start(t, run, []string{"worker"}, env)
	w2 := process.Start(t, run, []string{"worker"}, env)

	// The fallback scheduled each job for when the API's breaker would
	// probe again (~1.5 s); River's scheduler promotes due jobs every 5 s.
	const bound = 30 * time.Second
	deadline := healed.Add(bound)
	for countOrders(t, db, order.StatusPaid) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d orders paid %v after the provider recovered", countOrders(t, db, order.StatusPaid), n, bound)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("backlog of %d drained %v after the provider recovered", n, time.Since(healed).Round(100*time.Millisecond))

	st := sim.Stats(t)
	if st.TotalCharges != n || st.DuplicateReferences != 0 {
		t.Errorf("provider: %d charges, %d references charged more than once; want %d and 0", st.TotalCharges, st.DuplicateReferences, n)
	}
	// River runs up to WORKER_CONCURRENCY (32) jobs per worker; only the
	// limit's slots call the provider.
	if limit := 2 * workerResilienceDefaults().LimitMax; st.MaxInFlight > limit {
		t.Errorf("provider max in-flight = %d, want ≤ %d (two workers' limits)", st.MaxInFlight, limit)
	}
	paid := metric(t, w1.URL, `checkout_charge_jobs_total{outcome="paid"}`) + metric(t, w2.URL, `checkout_charge_jobs_total{outcome="paid"}`)
	if paid != n {
		t.Errorf("paid jobs reported by the two workers = %v, want %d", paid, n)
	}
}

func TestRiverUIRequiresBasicAuthWhenConfigured(t *testing.T) {
	t.Parallel()
	p := process.Start(t, run, []string{"worker"}, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbtest.URL(t),
		"STRIPE_API_BASE": "http://localhost:8082", // no provider there
		"RIVERUI_USER":    "ops", "RIVERUI_PASSWORD": "s3cret",
	})
	tests := []struct {
		name, user, password string
		want                 int
	}{
		{"no credentials", "", "", http.StatusUnauthorized},
		{"wrong password", "ops", "guess", http.StatusUnauthorized},
		{"right credentials", "ops", "s3cret", http.StatusOK},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/riverui/", nil)
		if tt.user != "" {
			req.SetBasicAuth(tt.user, tt.password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: GET /riverui/ = %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}

// placeOrders runs the API's checkout flow in-process against the
// simulator, as cmd/checkout wires it.
func placeOrders(t *testing.T, db *pgxpool.Pool, simURL string, n int) {
	t.Helper()
	payer, err := payment.NewProtectedClient("payment", payment.Config{BaseURL: simURL, SecretKey: "sk_test_checkout"}, resilience.DefaultConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	svc := newOrderService(t, db, orderpayment.New(payer))
	req := order.PlaceRequest{CustomerID: "cus_1", Currency: "USD", PaymentMethod: "pm_card_visa",
		Items: []order.Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 500}}}
	for i := range n {
		if _, err := svc.Place(context.Background(), fmt.Sprintf("drain-%d", i), req); err != nil {
			t.Fatalf("place order %d: %v", i, err)
		}
	}
}

// newOrderService is the checkout flow as cmd/checkout wires it.
func newOrderService(t *testing.T, db *pgxpool.Pool, payer order.Payer) *order.Service {
	t.Helper()
	jobs, err := river.NewClient(riverpgxv5.New(db), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return order.NewService(db, payer, jobs, order.DefaultConfig(), slog.New(slog.DiscardHandler))
}

func countOrders(t *testing.T, db *pgxpool.Pool, status order.Status) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE status = $1`, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// metric reads one sample from a process's /metrics.
func metric(t *testing.T, baseURL, sample string) float64 {
	t.Helper()
	resp, err := http.Get(baseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), sample+" "); ok {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", sample, err)
			}
			return v
		}
	}
	return 0
}

// TestShutdownLetsRunningChargeFinish stops the worker (as SIGTERM does)
// while a charge is inside the provider call: the soft stop must let it
// finish and commit, instead of abandoning a charge the provider made.
func TestShutdownLetsRunningChargeFinish(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	sim := simtest.Start(t, time.Second)
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	sim.Fault(t, `{"down":true}`)
	placeOrders(t, db, sim.URL, 1)
	sim.Heal(t)

	w := process.Start(t, run, []string{"worker"}, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": sim.URL,
		"PAYMENT_ATTEMPT_TIMEOUT": "5s", "BREAKER_SLOW_CALL_THRESHOLD": "5s",
	})
	for deadline := time.Now().Add(15 * time.Second); sim.Sim.Stats().InFlight == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the worker never called the provider")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := w.Stop(); err != nil {
		t.Fatalf("worker stopped with error: %v", err)
	}
	if got := countOrders(t, db, order.StatusPaid); got != 1 {
		t.Errorf("paid orders after shutdown = %d, want 1: the running charge was abandoned", got)
	}
}
