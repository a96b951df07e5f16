package paymentsim

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// Fault is a kind of provider trouble. Several faults can be active at once; see Merge.
type Fault struct {
	// Trouble is added latency (to every charge's processing time), a share of requests
	// answered 500 without being processed, and an outage (503 to every request, as a
	// provider in maintenance answers).
	simulator.Trouble
	// Hang holds requests without an answer until the fault ends or the client gives up.
	Hang bool `json:"hang,omitzero"`
	// RefuseConnections closes the connection without a response, so the client sees a
	// connection error.
	RefuseConnections bool `json:"refuse_connections,omitzero"`
	// ResetAfterCharge records the charge, then drops the connection without answering: the
	// lost response that only an idempotency key makes safe to retry.
	ResetAfterCharge bool `json:"reset_after_charge,omitzero"`
	// Capacity replaces Config.Capacity while the fault is active: a provider that lost
	// workers (or, set higher, gained them). Overlapping faults take the smallest.
	Capacity int `json:"capacity,omitzero"`
}

// Validate reports why f cannot be scheduled, or nil.
func (f Fault) Validate() error {
	if err := f.Trouble.Validate(); err != nil {
		return err
	}
	switch {
	case f.Capacity < 0:
		return errors.New("capacity must not be negative")
	case f == Fault{}:
		return errors.New("no fault given")
	}
	return nil
}

// Merge combines two overlapping faults: latencies add up, the higher error rate and the
// smaller capacity win, and any switched-on mode stays on.
func (f Fault) Merge(g Fault) Fault {
	return Fault{
		Trouble:           f.Trouble.Merge(g.Trouble),
		Hang:              f.Hang || g.Hang,
		RefuseConnections: f.RefuseConnections || g.RefuseConnections,
		ResetAfterCharge:  f.ResetAfterCharge || g.ResetAfterCharge,
		Capacity:          minCapacity(f.Capacity, g.Capacity),
	}
}

// minCapacity returns the smaller of two capacities, where 0 means "not set".
func minCapacity(a, b int) int {
	if a == 0 || b == 0 {
		return max(a, b)
	}
	return min(a, b)
}

// faultRequest is the body of POST /admin/faults: a fault, optionally delayed by start_in and
// limited to duration (zero means until cleared).
type faultRequest struct {
	Fault
	simulator.Timing
}

// Parts implements simulator.FaultRequest.
func (req faultRequest) Parts() (Fault, simulator.Timing) { return req.Fault, req.Timing }

// hangRecheck is how often a hung request looks whether its fault has ended, so clearing a
// hang, or reaching the end of a scheduled one, releases waiting requests promptly.
const hangRecheck = 50 * time.Millisecond

// injectFault applies the faults that act before the ledger. It reports whether the request
// has been answered (or dropped) and with which outcome.
func (s *Simulator) injectFault(w http.ResponseWriter, r *http.Request, f Fault) (outcome, bool) {
	if f.RefuseConnections {
		dropConnection(w)
		return outcomeRefused, true
	}
	if f.Down {
		simulator.WriteError(w, http.StatusServiceUnavailable, "api_error", "the provider is down")
		return simulator.OutcomeDown, true
	}
	if f.Hang && !s.waitOutHang(r.Context()) {
		return simulator.OutcomeAbandoned, true
	}
	if f.ErrorRate > 0 && s.srv.Random() < f.ErrorRate {
		simulator.WriteError(w, http.StatusInternalServerError, "api_error", "injected server error")
		return simulator.OutcomeError, true
	}
	return "", false
}

// waitOutHang blocks while a hang fault is active. It reports false when the client gave up
// first: a hung request never reached the ledger, so there is nothing left to process.
func (s *Simulator) waitOutHang(ctx context.Context) bool {
	tick := time.NewTicker(hangRecheck)
	defer tick.Stop()
	for s.srv.ActiveFault().Hang {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// dropConnection closes the client's connection without writing a response, which the client
// sees as a connection error. Where the connection cannot be taken over (HTTP/2), aborting the
// handler resets the stream instead.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close() // Closing is the whole point; an error changes nothing.
}
