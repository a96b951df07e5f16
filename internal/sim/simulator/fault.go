package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Fault is what a simulator's fault type does so that a Schedule can hold
// it. Several faults can be active at once; Merge says how they combine.
type Fault[F any] interface {
	// Validate reports why the fault cannot be scheduled, or nil.
	Validate() error
	// Merge combines the fault with another one active at the same time.
	Merge(F) F
}

// Duration is a time.Duration written in JSON as a Go duration string such
// as "500ms".
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

// Window is a fault active from Start until End; a zero End means until
// cleared.
type Window[F any] struct {
	ID    int       `json:"id"`
	Fault F         `json:"fault"`
	Start time.Time `json:"starts_at"`
	End   time.Time `json:"ends_at,omitzero"`
}

func (w Window[F]) activeAt(t time.Time) bool {
	return !t.Before(w.Start) && (w.End.IsZero() || t.Before(w.End))
}

func (w Window[F]) endedBy(t time.Time) bool {
	return !w.End.IsZero() && !t.Before(w.End)
}

// Schedule holds the faults set now or scheduled for later. Windows are kept
// as absolute times, so an experiment can script an outage ("down from t+5s
// for 10s") in one call. The zero Schedule is empty and ready to use.
type Schedule[F Fault[F]] struct {
	mu      sync.Mutex
	nextID  int
	windows []Window[F]
}

// Add schedules f from start until end (zero: until cleared).
func (s *Schedule[F]) Add(f F, start, end time.Time) Window[F] {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	w := Window[F]{ID: s.nextID, Fault: f, Start: start, End: end}
	s.windows = append(s.windows, w)
	return w
}

// Active returns the merge of every fault active at now, dropping windows
// that have ended.
func (s *Schedule[F]) Active(now time.Time) F {
	var f F
	for _, w := range s.List(now) {
		if w.activeAt(now) {
			f = f.Merge(w.Fault)
		}
	}
	return f
}

// List returns the windows that are active or still to come.
func (s *Schedule[F]) List(now time.Time) []Window[F] {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.windows = slices.DeleteFunc(s.windows, func(w Window[F]) bool { return w.endedBy(now) })
	return slices.Clone(s.windows)
}

// Clear drops every window.
func (s *Schedule[F]) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.windows = nil
}

// Trouble is the part of a fault both simulators know: added latency, a
// share of requests answered 500, and an outage. A simulator's Fault embeds
// it, so its fields stand in the fault's JSON beside the simulator's own.
type Trouble struct {
	// Latency is added to every answer's time.
	Latency Duration `json:"latency,omitzero"`
	// ErrorRate is the share of requests, 0 to 1, answered 500 without
	// being served.
	ErrorRate float64 `json:"error_rate,omitzero"`
	// Down answers 503 to every request, as a system in maintenance does.
	Down bool `json:"down,omitzero"`
}

// Validate reports why t cannot be scheduled, or nil.
func (t Trouble) Validate() error {
	switch {
	case t.Latency < 0:
		return errors.New("latency must not be negative")
	case t.ErrorRate < 0 || t.ErrorRate > 1:
		return errors.New("error_rate must be between 0 and 1")
	}
	return nil
}

// Merge combines two overlapping troubles: latencies add up, the higher
// error rate wins, and down stays on.
func (t Trouble) Merge(u Trouble) Trouble {
	return Trouble{
		Latency:   t.Latency + u.Latency,
		ErrorRate: max(t.ErrorRate, u.ErrorRate),
		Down:      t.Down || u.Down,
	}
}
