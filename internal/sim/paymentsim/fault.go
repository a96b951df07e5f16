package paymentsim

import (
	"context"
	"errors"
	"fmt"
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
	// ErrorStatus is the status of the answers ErrorRate injects: 500 (the default) or 503,
	// with the body an outage answers.
	ErrorStatus int `json:"error_status,omitzero"`
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
	// LatencyMedian, LatencySigma and LatencyCap replace the configured distribution of
	// processing times while the fault is active: log-normal with that median and σ (0: the
	// median every time), truncated at the cap (0: none; see logNormal.quantile).
	// Overlapping faults take the slower distribution whole (see logNormal.slowerThan).
	LatencyMedian simulator.Duration `json:"latency_median,omitzero"`
	LatencySigma  float64            `json:"latency_sigma,omitzero"`
	LatencyCap    simulator.Duration `json:"latency_cap,omitzero"`
	// LatencyFactor, at least 1, multiplies every request's drawn processing time (before the
	// added Latency): a brownout. Overlapping factors multiply.
	LatencyFactor float64 `json:"latency_factor,omitzero"`
	// RateLimit replaces Config.RateLimit while the fault is active, in charges per second
	// (see chargeLimiter). Overlapping faults take the smallest.
	RateLimit int `json:"rate_limit,omitzero"`
}

// maxLatencyFactor bounds a brownout's factor, far beyond any brownout worth simulating: a
// larger one is more likely a typo.
const maxLatencyFactor = 1000

// Validate reports why f cannot be scheduled, or nil.
func (f Fault) Validate() error {
	if err := f.Trouble.Validate(); err != nil {
		return err
	}
	switch {
	case f.ErrorStatus != 0 && f.ErrorStatus != http.StatusInternalServerError && f.ErrorStatus != http.StatusServiceUnavailable:
		return errors.New("error_status must be 500 or 503")
	case f.ErrorStatus != 0 && f.ErrorRate == 0:
		return errors.New("error_status needs an error_rate")
	case f.Capacity < 0:
		return errors.New("capacity must not be negative")
	case f.LatencyMedian < 0 || f.LatencyCap < 0:
		return errors.New("latency_median and latency_cap must not be negative")
	case f.LatencySigma < 0 || f.LatencySigma > MaxLatencySigma:
		return fmt.Errorf("latency_sigma must be between 0 and %d", MaxLatencySigma)
	case (f.LatencySigma != 0 || f.LatencyCap != 0) && f.LatencyMedian == 0:
		return errors.New("latency_sigma and latency_cap need a latency_median")
	case f.LatencyCap != 0 && f.LatencyCap <= f.LatencyMedian:
		return errors.New("latency_cap must be above latency_median")
	case f.LatencyFactor != 0 && (f.LatencyFactor < 1 || f.LatencyFactor > maxLatencyFactor):
		return fmt.Errorf("latency_factor must be between 1 and %d", maxLatencyFactor)
	case f.RateLimit < 0:
		return errors.New("rate_limit must not be negative")
	case f == Fault{}:
		return errors.New("no fault given")
	}
	return nil
}

// Merge combines two overlapping faults: latencies add up and latency factors multiply, the
// higher error rate (with its status; 503 on a tie), the slower latency distribution and the
// smaller capacity and rate limit win, and any switched-on mode stays on.
func (f Fault) Merge(g Fault) Fault {
	m := Fault{
		Trouble:           f.Trouble.Merge(g.Trouble),
		ErrorStatus:       mergeErrorStatus(f, g),
		Hang:              f.Hang || g.Hang,
		RefuseConnections: f.RefuseConnections || g.RefuseConnections,
		ResetAfterCharge:  f.ResetAfterCharge || g.ResetAfterCharge,
		Capacity:          minSet(f.Capacity, g.Capacity),
		LatencyFactor:     mulSet(f.LatencyFactor, g.LatencyFactor),
		RateLimit:         minSet(f.RateLimit, g.RateLimit),
	}
	slower := f
	if g.distribution().slowerThan(f.distribution()) {
		slower = g
	}
	m.LatencyMedian, m.LatencySigma, m.LatencyCap = slower.LatencyMedian, slower.LatencySigma, slower.LatencyCap
	return m
}

// distribution is f's latency distribution; it applies when LatencyMedian is set.
func (f Fault) distribution() logNormal {
	return logNormal{median: time.Duration(f.LatencyMedian), sigma: f.LatencySigma, cap: time.Duration(f.LatencyCap)}
}

// mergeErrorStatus is the status of the merged fault's injected errors: the status of the
// higher error rate, 503 of two equal ones.
func mergeErrorStatus(f, g Fault) int {
	switch {
	case f.ErrorRate > g.ErrorRate:
		return f.ErrorStatus
	case g.ErrorRate > f.ErrorRate:
		return g.ErrorStatus
	}
	return max(f.ErrorStatus, g.ErrorStatus)
}

// minSet returns the smaller of two limits, where 0 means "not set".
func minSet(a, b int) int {
	if a == 0 || b == 0 {
		return max(a, b)
	}
	return min(a, b)
}

// mulSet returns the product of two factors, where 0 means "not set".
func mulSet(a, b float64) float64 {
	if a == 0 || b == 0 {
		return max(a, b)
	}
	return a * b
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
		writeUnavailable(w)
		return simulator.OutcomeDown, true
	}
	if f.Hang && !s.waitOutHang(r.Context()) {
		return simulator.OutcomeAbandoned, true
	}
	if f.ErrorRate > 0 && s.srv.Random() < f.ErrorRate {
		if f.ErrorStatus == http.StatusServiceUnavailable {
			writeUnavailable(w)
		} else {
			simulator.WriteError(w, http.StatusInternalServerError, "api_error", "injected server error")
		}
		return simulator.OutcomeError, true
	}
	return "", false
}

// writeUnavailable answers 503 as a provider in maintenance does: for an outage, and for the
// share of an error burst whose error_status is 503.
func writeUnavailable(w http.ResponseWriter) {
	simulator.WriteError(w, http.StatusServiceUnavailable, "api_error", "the provider is down")
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
