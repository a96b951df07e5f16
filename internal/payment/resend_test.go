package payment

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync/atomic"
	"testing"

	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
)

// droppingProvider is a provider that charges order o2, then dies: it stops accepting
// connections and drops the one the charge came on without answering. The client sees that
// on a reused keep-alive connection, the case in which net/http's Transport re-sends a request
// carrying an Idempotency-Key by itself (Transport.roundTrip, shouldRetryRequest,
// Request.isReplayable); the re-send cannot connect, so the caller's error would be a dial
// error that hides the lost answer.
func droppingProvider(t *testing.T) (url string, sim *paymentsim.Simulator) {
	t.Helper()
	sim = paymentsim.New(paymentsim.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") != IdempotencyKey("o2") {
			sim.ServeHTTP(w, r)
			return
		}
		sim.ServeHTTP(httptest.NewRecorder(), r) // charged; the answer is lost
		_ = ln.Close()                           // new connections are refused from now on
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), sim
}

// chargeOnReusedConn charges o1 (leaving its connection idle in the pool), then o2 on that
// same connection, and returns the o2 charge's error.
func chargeOnReusedConn(t *testing.T, client *Client) error {
	t.Helper()
	if _, err := client.Charge(t.Context(), ChargeRequest{OrderID: "o1", Amount: 2598, Currency: "USD", PaymentMethod: "pm_card_visa"}); err != nil {
		t.Fatalf("Charge o1: %v", err)
	}
	var n, reused atomic.Int32
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if n.Add(1) == 1 && info.Reused {
			reused.Store(1)
		}
	}})
	_, err := client.Charge(ctx, ChargeRequest{OrderID: "o2", Amount: 2598, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if reused.Load() != 1 {
		t.Fatal("the o2 charge did not go out on the reused connection; the scenario did not happen")
	}
	return err
}

func isDialError(err error) bool {
	opErr, ok := errors.AsType[*net.OpError](err)
	return ok && opErr.Op == "dial"
}

// A charge whose answer was lost on a reused connection is ambiguous: the provider holds the
// charge. The client does not let the transport re-send it, so the caller sees the original,
// transient error rather than the dial error of a re-send.
func TestLostAnswerOnReusedConnIsNotResent(t *testing.T) {
	t.Parallel()
	url, sim := droppingProvider(t)
	client, err := NewClient(Config{BaseURL: url, SecretKey: "sk_test_checkout"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)

	err = chargeOnReusedConn(t, client)
	if got := sim.Stats().ChargesByReference["o2"]; got != 1 {
		t.Fatalf("provider charges for o2: got %d, want 1", got)
	}
	if !IsTransient(err) {
		t.Fatalf("got %v, want a transient error", err)
	}
	if isDialError(err) {
		t.Errorf("got the dial error %v of a transport re-send, want the lost answer's own error", err)
	}
}
