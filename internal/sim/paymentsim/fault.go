package paymentsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Fault is a kind of provider trouble. Several faults can be active at once; see merge.
type Fault struct {
	// Latency is added to every charge's processing time.
	Latency Duration `json:"latency,omitzero"`
	// ErrorRate is the share of requests, 0 to 1, answered 500 without being processed.
	ErrorRate float64 `json:"error_rate,omitzero"`
	// Hang holds requests without an answer until the fault ends or the client gives up.
	Hang bool `json:"hang,omitzero"`
	// Down answers 503 to every request, as a provider in maintenance does.
	Down bool `json:"down,omitzero"`
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

func (f Fault) validate() error {
	switch {
	case f.Latency < 0:
		return errors.New("latency must not be negative")
	case f.ErrorRate < 0 || f.ErrorRate > 1:
		return errors.New("error_rate must be between 0 and 1")
	case f.Capacity < 0:
		return errors.New("capacity must not be negative")
	case f == Fault{}:
		return errors.New("no fault given")
	}
	return nil
}

// merge combines two overlapping faults: latencies add up, the higher error rate and the
// smaller capacity win, and any switched-on mode stays on.
func (f Fault) merge(g Fault) Fault {
	return Fault{
		Latency:           f.Latency + g.Latency,
		ErrorRate:         max(f.ErrorRate, g.ErrorRate),
		Hang:              f.Hang || g.Hang,
		Down:              f.Down || g.Down,
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

// Duration is a time.Duration written in JSON as a Go duration string such as "500ms".
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"500ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Window is a fault active from Start until End; a zero End means until cleared.
type Window struct {
	ID    int       `json:"id"`
	Fault Fault     `json:"fault"`
	Start time.Time `json:"starts_at"`
	End   time.Time `json:"ends_at,omitzero"`
}

func (w Window) activeAt(t time.Time) bool {
	return !t.Before(w.Start) && (w.End.IsZero() || t.Before(w.End))
}

func (w Window) endedBy(t time.Time) bool {
	return !w.End.IsZero() && !t.Before(w.End)
}

// schedule holds the faults set now or scheduled for later. Windows are kept as absolute
// times, so an experiment can script an outage ("slow from t+0.5s for 3s") in one call.
type schedule struct {
	mu      sync.Mutex
	nextID  int
	windows []Window
}

func (s *schedule) add(f Fault, start, end time.Time) Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	w := Window{ID: s.nextID, Fault: f, Start: start, End: end}
	s.windows = append(s.windows, w)
	return w
}

// active returns the merge of every fault active at now, dropping windows that have ended.
func (s *schedule) active(now time.Time) Fault {
	var f Fault
	for _, w := range s.list(now) {
		if w.activeAt(now) {
			f = f.merge(w.Fault)
		}
	}
	return f
}

// list returns the windows that are active or still to come.
func (s *schedule) list(now time.Time) []Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.windows = slices.DeleteFunc(s.windows, func(w Window) bool { return w.endedBy(now) })
	return slices.Clone(s.windows)
}

func (s *schedule) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.windows = nil
}

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
		writeError(w, http.StatusServiceUnavailable, "api_error", "the provider is down")
		return outcomeDown, true
	}
	if f.Hang && !s.waitOutHang(r.Context()) {
		return outcomeAbandoned, true
	}
	if f.ErrorRate > 0 && s.random() < f.ErrorRate {
		writeError(w, http.StatusInternalServerError, "api_error", "injected server error")
		return outcomeError, true
	}
	return "", false
}

// waitOutHang blocks while a hang fault is active. It reports false when the client gave up
// first: a hung request never reached the ledger, so there is nothing left to process.
func (s *Simulator) waitOutHang(ctx context.Context) bool {
	tick := time.NewTicker(hangRecheck)
	defer tick.Stop()
	for s.faults.active(time.Now()).Hang {
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
