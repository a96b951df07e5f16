package experiment

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Millis is a duration written in JSON as fractional milliseconds, the unit the report and
// any plotting of its samples use.
type Millis time.Duration

// MarshalJSON writes d in milliseconds, to the microsecond.
func (d Millis) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, math.Round(float64(d)/1e3)/1e3, 'f', -1, 64), nil
}

// UnmarshalJSON reads milliseconds.
func (d *Millis) UnmarshalJSON(b []byte) error {
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("milliseconds: %w", err)
	}
	*d = Millis(math.Round(ms * 1e6))
	return nil
}

// Summary condenses a set of samples: how many, how they ended, and their latency.
// Percentiles include failures at the time they were given up after, so a timeout pulls them
// up rather than vanishing from them.
type Summary struct {
	Count    int            `json:"count"`
	Outcomes map[string]int `json:"outcomes"`
	P50      Millis         `json:"p50_ms"`
	P95      Millis         `json:"p95_ms"`
	P99      Millis         `json:"p99_ms"`
	// Stale counts the answers checkout marked as checked against stale catalog prices.
	Stale int `json:"stale"`
	// Unavailable counts the 503 answers with a Retry-After header; UnavailableBare those
	// without one, which leave a client guessing when to come back.
	Unavailable     int `json:"unavailable_with_retry_after"`
	UnavailableBare int `json:"unavailable_without_retry_after"`
}

// summarize summarises the samples of probe p for which keep holds.
func summarize(samples []Sample, p Probe, keep func(Sample) bool) Summary {
	s := Summary{Outcomes: make(map[string]int)}
	var latencies []time.Duration
	for _, x := range samples {
		if x.Probe != p || !keep(x) {
			continue
		}
		s.Count++
		s.Outcomes[x.Outcome]++
		if x.Stale {
			s.Stale++
		}
		if x.Outcome == "503" {
			if x.RetryAfter != "" {
				s.Unavailable++
			} else {
				s.UnavailableBare++
			}
		}
		latencies = append(latencies, time.Duration(x.Latency))
	}
	s.P50 = Millis(Percentile(latencies, 50))
	s.P95 = Millis(Percentile(latencies, 95))
	s.P99 = Millis(Percentile(latencies, 99))
	return s
}

// ServerErrors counts the answers with a 5xx status.
func (s Summary) ServerErrors() int {
	n := 0
	for outcome, count := range s.Outcomes {
		if len(outcome) == 3 && outcome[0] == '5' {
			n += count
		}
	}
	return n
}

// Percentile returns the nearest-rank p-th percentile (the smallest value at least p % of the
// values do not exceed), or 0 for no values. Nearest rank always returns a measured value,
// which keeps small samples (12 probes in a slow phase) honest.
func Percentile(values []time.Duration, p float64) time.Duration {
	if len(values) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(values))
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// ScheduleError refuses a run whose requests or probes went out late.
type ScheduleError struct {
	Late     int           // requests and probes issued more than Max late
	Total    int           // requests and probes issued
	Worst    time.Duration // the latest one's lag
	WorstAt  time.Duration // when it was due
	WorstFor Probe
	Max      time.Duration
}

func (e *ScheduleError) Error() string {
	return fmt.Sprintf("the load generator fell behind schedule: %d of %d requests went out more than %v late "+
		"(worst: %s due at %v went out %v late); its latencies would measure this tool, not the service, so the run is not reported",
		e.Late, e.Total, e.Max, e.WorstFor, e.WorstAt, e.Worst.Round(time.Microsecond))
}

// checkSchedule returns the latest any sample went out, and a *ScheduleError when any went
// out more than maxLag late.
func checkSchedule(samples []Sample, maxLag time.Duration) (time.Duration, error) {
	e := &ScheduleError{Total: len(samples), Max: maxLag}
	for _, s := range samples {
		lag := time.Duration(s.Lag)
		if lag > maxLag {
			e.Late++
		}
		if lag > e.Worst {
			e.Worst, e.WorstAt, e.WorstFor = lag, time.Duration(s.At), s.Probe
		}
	}
	if e.Late > 0 {
		return e.Worst, e
	}
	return e.Worst, nil
}
