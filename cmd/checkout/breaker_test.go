package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

// TestBreakerSwitchDefersEveryOrderUntilCleared: `checkout breaker open
// payment` makes two running checkout replicas defer every order (202)
// without a single provider call; `checkout breaker clear payment` lets
// them charge again.
func TestBreakerSwitchDefersEveryOrderUntilCleared(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	sim := simtest.Start(t, 0)
	replicas := []*process.Process{
		startCheckout(t, dbURL, sim.URL, nil),
		startCheckout(t, dbURL, sim.URL, nil),
	}
	cli := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		env := map[string]string{"DATABASE_URL": dbURL}
		if err := run(context.Background(), append([]string{"checkout", "breaker"}, args...), func(k string) string { return env[k] }, &out, io.Discard); err != nil {
			t.Fatalf("checkout breaker %v: %v", args, err)
		}
		return out.String()
	}

	cli("open", "payment", "--for", "30m")
	for _, p := range replicas {
		awaitMetric(t, p.URL, `resilience_breaker_source{name="payment",source="forced"} 1`)
	}
	if out := cli("status"); !strings.Contains(out, "payment") || !strings.Contains(out, "forced_open") {
		t.Errorf("status while forced open:\n%s", out)
	}
	for i := range 10 {
		if got := placeOrder(t, replicas[i%2].URL); got != http.StatusAccepted {
			t.Fatalf("order %d while forced open: status %d, want 202", i, got)
		}
	}
	if got := sim.Stats(t).TotalCharges; got != 0 {
		t.Errorf("provider charges while forced open = %d, want 0", got)
	}

	cli("clear", "payment")
	for _, p := range replicas {
		awaitMetric(t, p.URL, `resilience_breaker_source{name="payment",source="local"} 1`)
		if got := placeOrder(t, p.URL); got != http.StatusCreated {
			t.Errorf("order after clearing: status %d, want 201", got)
		}
	}
	if got := sim.Stats(t).TotalCharges; got != 2 {
		t.Errorf("provider charges after clearing = %d, want 2", got)
	}
	if out := cli("status"); !strings.Contains(out, "closed") {
		t.Errorf("status after clearing:\n%s", out)
	}
}

func TestBreakerCommandRejectsBadArguments(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
	for _, args := range [][]string{{}, {"open"}, {"open", "payment", "--for", "soon"}, {"open", "payment", "extra"}, {"flip", "payment"}} {
		err := run(context.Background(), append([]string{"checkout", "breaker"}, args...), func(k string) string { return env[k] }, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("checkout breaker %q: got nil error", args)
		}
	}
}

// TestBreakerCommandRefusesUnknownDependencies: a mistyped dependency is
// refused with the names the switch knows, and writes no row (a row for
// "paymnet" would say "forced open" while payment kept charging).
func TestBreakerCommandRefusesUnknownDependencies(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	for _, args := range [][]string{{"open", "paymnet"}, {"open", "paymnet", "--for", "30m"}, {"clear", "paymnet"}, {"open", "Payment"}} {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"checkout", "breaker"}, args...), func(k string) string { return env[k] }, &out, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "unknown dependency") || !strings.Contains(err.Error(), "known: payment") {
			t.Errorf("checkout breaker %q: err = %v, want unknown dependency, known: payment", args, err)
		}
		if out.Len() > 0 {
			t.Errorf("checkout breaker %q printed %q, want nothing", args, out.String())
		}
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var rows int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM breaker_states`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("breaker_states rows after refused commands = %d, want 0", rows)
	}
}

func placeOrder(t *testing.T, base string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/orders", strings.NewReader(orderBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// awaitMetric waits until base's /metrics has the line want: the state is
// imposed by the process's coordinator, in the background.
func awaitMetric(t *testing.T, base, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), want+"\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/metrics has no %s within 5s", base, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
