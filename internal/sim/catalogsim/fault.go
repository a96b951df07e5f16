package catalogsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Fault is a kind of catalog trouble. Several faults can be active at
// once; see merge.
type Fault struct {
	// Latency is added to every answer's time.
	Latency Duration `json:"latency,omitzero"`
	// ErrorRate is the share of requests, 0 to 1, answered 500.
	ErrorRate float64 `json:"error_rate,omitzero"`
	// Down answers 503 to every request, as a catalog in maintenance does.
	Down bool `json:"down,omitzero"`
}

func (f Fault) validate() error {
	switch {
	case f.Latency < 0:
		return errors.New("latency must not be negative")
	case f.ErrorRate < 0 || f.ErrorRate > 1:
		return errors.New("error_rate must be between 0 and 1")
	case f == Fault{}:
		return errors.New("no fault given")
	}
	return nil
}

// merge combines two overlapping faults: latencies add up, the higher
// error rate wins, and down stays on.
func (f Fault) merge(g Fault) Fault {
	return Fault{
		Latency:   f.Latency + g.Latency,
		ErrorRate: max(f.ErrorRate, g.ErrorRate),
		Down:      f.Down || g.Down,
	}
}

// Duration is a time.Duration written in JSON as a Go duration string
// such as "500ms".
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

// schedule holds the faults set now or scheduled for later, as absolute
// times, so an experiment can script an outage ("down from t+5s for 10s")
// in one call.
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

// active returns the merge of every fault active at now, dropping windows
// that have ended.
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
