package experiment

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	upTo := func(n int) []time.Duration { // n ms down to 1 ms
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(n-i) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name   string
		values []time.Duration
		p      float64
		want   time.Duration
	}{
		{"no values", nil, 50, 0},
		{"one value", ms(7), 95, 7 * time.Millisecond},
		{"median of ten", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 50, 5 * time.Millisecond},
		{"p95 of ten is the largest", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 95, 10 * time.Millisecond},
		{"p95 of twenty is the 19th", ms(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 95, 19 * time.Millisecond},
		{"p50 of twelve probes with eight timeouts", ms(2, 2, 3, 3, 2000, 2000, 2000, 2000, 2000, 2000, 2000, 2000), 50, 2000 * time.Millisecond},
		// ⌈0.99 × 60⌉ = 60: rounding 59.4 to the nearest would give the 59th.
		{"p99 of 60 is the largest", upTo(60), 99, 60 * time.Millisecond},
		{"p99 of 600 is the 594th", upTo(600), 99, 594 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Percentile(tt.values, tt.p); got != tt.want {
				t.Errorf("Percentile(%d values, %v) = %v, want %v", len(tt.values), tt.p, got, tt.want)
			}
		})
	}
}

func TestPercentileLeavesInputUnsorted(t *testing.T) {
	t.Parallel()
	values := []time.Duration{3, 1, 2}
	Percentile(values, 50)
	if got, want := values, []time.Duration{3, 1, 2}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("values = %v after percentile, want %v", got, want)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	samples := []Sample{
		{Probe: ProbeCheckout, Outcome: "201", Latency: Millis(200 * time.Millisecond)},
		{Probe: ProbeCheckout, Outcome: "202", Latency: Millis(3 * time.Millisecond)},
		{Probe: ProbeCheckout, Outcome: "202", Latency: Millis(4 * time.Millisecond)},
		{Probe: ProbeHealth, Outcome: OutcomeTimeout, Latency: Millis(2 * time.Second)},
	}
	got := summarize(samples, ProbeCheckout, func(s Sample) bool { return true })
	if got.Count != 3 || got.Outcomes["201"] != 1 || got.Outcomes["202"] != 2 || len(got.Outcomes) != 2 {
		t.Errorf("summarize counted %d: %v, want 3: 1×201, 2×202", got.Count, got.Outcomes)
	}
	if got, want := time.Duration(got.P50), 4*time.Millisecond; got != want {
		t.Errorf("p50 = %v, want %v", got, want)
	}
	if got, want := time.Duration(got.P95), 200*time.Millisecond; got != want {
		t.Errorf("p95 = %v, want %v", got, want)
	}
	if got, want := time.Duration(got.P99), 200*time.Millisecond; got != want {
		t.Errorf("p99 = %v, want %v", got, want)
	}
}

func TestCheckSchedule(t *testing.T) {
	t.Parallel()
	at := func(probe Probe, due, lag time.Duration) Sample {
		return Sample{Probe: probe, At: Millis(due), Lag: Millis(lag)}
	}
	tests := []struct {
		name      string
		samples   []Sample
		wantWorst time.Duration
		wantLate  int // 0: the run must be accepted
	}{
		{"on time", []Sample{at(ProbeCheckout, 0, time.Millisecond), at(ProbeHealth, 250*time.Millisecond, 2*time.Millisecond)}, 2 * time.Millisecond, 0},
		{"exactly at the limit", []Sample{at(ProbeCheckout, 0, 20*time.Millisecond)}, 20 * time.Millisecond, 0},
		{"one request late", []Sample{at(ProbeCheckout, 0, 0), at(ProbeCheckout, 50*time.Millisecond, 21*time.Millisecond)}, 21 * time.Millisecond, 1},
		{"a late probe counts too", []Sample{at(ProbeHealth, time.Second, 300*time.Millisecond), at(ProbeCheckout, 0, 25*time.Millisecond)}, 300 * time.Millisecond, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			worst, err := checkSchedule(tt.samples, 20*time.Millisecond)
			if worst != tt.wantWorst {
				t.Errorf("worst lag = %v, want %v", worst, tt.wantWorst)
			}
			var late *ScheduleError
			switch {
			case tt.wantLate == 0 && err != nil:
				t.Errorf("checkSchedule() = %v, want nil", err)
			case tt.wantLate > 0 && !errors.As(err, &late):
				t.Errorf("checkSchedule() = %v, want a *ScheduleError", err)
			case tt.wantLate > 0 && late.Late != tt.wantLate:
				t.Errorf("late = %d, want %d", late.Late, tt.wantLate)
			}
		})
	}
}

func TestMillisJSON(t *testing.T) {
	t.Parallel()
	in := Millis(1234567 * time.Nanosecond)
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "1.235"; got != want {
		t.Errorf("json = %s, want %s", got, want)
	}
	var out Millis
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := time.Duration(out), 1235*time.Microsecond; got != want {
		t.Errorf("round trip = %v, want %v", got, want)
	}
}

// TestSummarizeCatalogAnswers: a catalog run's summary counts the answers marked stale, the
// 5xx, and the 503s by whether they said when to come back.
func TestSummarizeCatalogAnswers(t *testing.T) {
	t.Parallel()
	samples := []Sample{
		{Probe: ProbeCheckout, Outcome: "201"},
		{Probe: ProbeCheckout, Outcome: "201", Stale: true},
		{Probe: ProbeCheckout, Outcome: "202", Stale: true},
		{Probe: ProbeCheckout, Outcome: "503", RetryAfter: "1"},
		{Probe: ProbeCheckout, Outcome: "503", RetryAfter: "4"},
		{Probe: ProbeCheckout, Outcome: "503"},
		{Probe: ProbeCheckout, Outcome: "500"},
		{Probe: ProbeCheckout, Outcome: "429", RetryAfter: "1"},
		{Probe: ProbeCheckout, Outcome: OutcomeTimeout},
		{Probe: ProbeHealth, Outcome: "503", RetryAfter: "1"}, // another probe: not counted
	}
	got := summarize(samples, ProbeCheckout, func(Sample) bool { return true })
	if got.Stale != 2 {
		t.Errorf("stale = %d, want 2", got.Stale)
	}
	if got.Unavailable != 2 || got.UnavailableBare != 1 {
		t.Errorf("503 with / without Retry-After = %d / %d, want 2 / 1", got.Unavailable, got.UnavailableBare)
	}
	if got, want := got.ServerErrors(), 4; got != want {
		t.Errorf("ServerErrors() = %d, want %d (three 503s and a 500; not the 429 or the timeout)", got, want)
	}
}
