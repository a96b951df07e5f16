package experiment

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// matrixReports are four runs of the matrix in miniature: a healthy row and the seed's
// outage, each in timeout and protected mode, handed over out of row order.
func matrixReports(t *testing.T) []Report {
	t.Helper()
	d := func(ms int) Millis { return Millis(time.Duration(ms) * time.Millisecond) }
	healthy := func(mode string) Report {
		return Report{
			Label: mode, Row: "1. healthy", Scenario: Scenario{Rate: 40, Fault: FaultNone},
			Checkout: Phases{All: Summary{Count: 4, Outcomes: map[string]int{"201": 4}, P50: d(205), P99: d(230)}},
			Audit:    Audit{ProviderMaxInFlight: 9, Drained: true},
		}
	}
	outage := healthy("protected")
	outage.Row, outage.Note = "5. seed outage", "the article's run"
	outage.Scenario = Scenario{Rate: 20, Fault: FaultLatency, OutageStart: d(500), OutageFor: d(3000)}
	outage.Checkout.All = Summary{Count: 8, Outcomes: map[string]int{"201": 2, "202": 4, "503": 1, OutcomeTimeout: 1}, P50: d(4), P99: d(3000)}
	outage.Audit = Audit{ProviderMaxInFlight: 12, ProviderMaxInFlightOutage: 6, ProviderRateLimited: 3, Drained: true}
	outage.Recovery = &Recovery{ChargesDuringFault: 5, LookupsDuringFault: 1, LastPaid: d(8200)}
	broken := outage
	broken.Label = "timeout"
	broken.Audit = Audit{ProviderMaxInFlight: 60, ProviderMaxInFlightOutage: 60, Lost: []string{"o7"}, DoubleCharged: 2, StillPending: 3}
	broken.Recovery = &Recovery{ChargesDuringFault: 60, LastPaid: NeverPaid}
	return []Report{healthy("timeout"), broken, healthy("protected"), outage}
}

func TestNewMatrix(t *testing.T) {
	t.Parallel()
	lines := NewMatrix(matrixReports(t))
	var order []string
	for _, l := range lines {
		order = append(order, l.Row+"/"+l.Mode)
	}
	if got, want := strings.Join(order, " "), "1. healthy/timeout 1. healthy/protected 5. seed outage/timeout 5. seed outage/protected"; got != want {
		t.Errorf("lines in order %q, want %q: grouped by row, each row's modes as they came", got, want)
	}
	healthy, outage := lines[0], lines[3]
	if healthy.Faulted || healthy.Charged != 4 || healthy.Requests != 4 || len(healthy.Other) != 0 {
		t.Errorf("healthy line = %+v, want 4 of 4 charged, no fault", healthy)
	}
	if !outage.Faulted || outage.Charged != 2 || outage.Deferred != 4 || outage.others() != 2 || outage.Other["503"] != 1 {
		t.Errorf("outage line = %+v, want 2×201, 4×202 and 2 others (a 503, a timeout)", outage)
	}
	if outage.ChargesIntoFault != 5 || outage.LookupsIntoFault != 1 || outage.MaxInFlightFault != 6 || outage.MaxInFlight != 12 ||
		outage.RateLimited != 3 || outage.AllPaid != Millis(8200*time.Millisecond) || time.Duration(outage.P99) != 3*time.Second {
		t.Errorf("outage line = %+v, want the recovery's and audit's figures", outage)
	}
	if broken := BrokenRuns(lines); len(broken) != 1 || broken[0].Mode != "timeout" || broken[0].Lost != 1 || broken[0].DoubleCharged != 2 {
		t.Errorf("BrokenRuns = %+v, want the timeout outage run alone", broken)
	}
}

func TestWriteMatrix(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := WriteMatrix(&b, NewMatrix(matrixReports(t))); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	wantAll(t, "matrix", got,
		// Broken invariants come first, in bold, and again in their cells.
		"**INVARIANT BROKEN**",
		"5. seed outage (timeout, 20 req/s): 1 lost, 2 charged twice",
		// A healthy row: no fault columns; its second mode leaves the row cell empty.
		"| 1. healthy | timeout, 40 req/s | 100 / 0 / 0 % | 205 ms / 230 ms | — | 9 | 0 | — | 0 | 0 |",
		"|  | protected, 40 req/s | 100 / 0 / 0 % |",
		"| 5. seed outage | timeout, 20 req/s | 25 / 50 / 25 % | 4.0 ms / 3000 ms | 60 (0) | 60 / 60 | 0 | not drained | **1** | **2** |",
		"|  | protected, 20 req/s | 25 / 50 / 25 % | 4.0 ms / 3000 ms | 5 (1) | 6 / 12 | 3 | 8.20 s | 0 | 0 |",
		"- **5. seed outage**: the article's run",
		"- 5. seed outage, protected, 20 req/s: other answers 1×503, 1×timeout.",
		"**not drained**: 3 orders still pending",
	)
	if n := strings.Count(got, "- **5. seed outage**"); n != 1 {
		t.Errorf("the row's note appears %d times, want once", n)
	}

	b.Reset()
	if err := WriteMatrix(&b, NewMatrix(matrixReports(t)[2:3])); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "INVARIANT") {
		t.Errorf("a clean matrix warns of a broken invariant:\n%s", b.String())
	}
}

// TestNeverPaidSurvivesJSON: the matrix reads the runs' JSON reports, so an order never
// paid must still read "never" after the round trip, and one paid before the fault's end 0 s.
func TestNeverPaidSurvivesJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		paid Millis
		want string
	}{{NeverPaid, "never"}, {0, "0.00 s"}, {Millis(1500 * time.Millisecond), "1.50 s"}} {
		b, err := json.Marshal(Recovery{LastPaid: tt.paid})
		if err != nil {
			t.Fatal(err)
		}
		var got Recovery
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if cell := paidCell(got.LastPaid); cell != tt.want {
			t.Errorf("%v after JSON reads %q, want %q", time.Duration(tt.paid), cell, tt.want)
		}
	}
}

func TestLogNormalQuantile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		median time.Duration
		sigma  float64
		p      float64
		want   time.Duration // median · exp(z·σ), z from a normal table
	}{
		{600 * time.Millisecond, 0.5, 0.5, 600 * time.Millisecond},
		{600 * time.Millisecond, 0.5, 0.99, 1920 * time.Millisecond},  // z 2.3263
		{600 * time.Millisecond, 0.5, 0.999, 2813 * time.Millisecond}, // z 3.0902
		{120 * time.Millisecond, 0.8, 0.99, 772 * time.Millisecond},
	}
	for _, tt := range tests {
		got := LogNormalQuantile(tt.median, tt.sigma, tt.p)
		if diff := (got - tt.want).Abs(); diff > time.Millisecond {
			t.Errorf("LogNormalQuantile(%v, %v, %v) = %v, want %v", tt.median, tt.sigma, tt.p, got, tt.want)
		}
	}
}

func TestDeriveSettings(t *testing.T) {
	t.Parallel()
	s := DeriveSettings(600*time.Millisecond, 0.5, 40)
	want := Settings{
		AttemptTimeout: 2820 * time.Millisecond, // p99.9 2813 ms, rounded up
		SlowThreshold:  1930 * time.Millisecond, // p99 1920.1 ms, rounded up
		Budget:         2820 * time.Millisecond,
		LimitMax:       77, // 40/s × 1.92 s
		APIPool:        77,
		LimitInitial:   24, // 40/s × 0.6 s
		BulkheadWait:   300 * time.Millisecond,
	}
	if s != want {
		t.Errorf("DeriveSettings = %+v, want %+v", s, want)
	}
	env := strings.Join(s.Env(), " ")
	for _, kv := range []string{"PAYMENT_ATTEMPT_TIMEOUT=2.82s", "BREAKER_SLOW_CALL_THRESHOLD=1.93s", "PAYMENT_BUDGET=2.82s",
		"PAYMENT_LIMIT_MAX=77", "API_POOL_SIZE=77", "PAYMENT_LIMIT_INITIAL=24", "PAYMENT_BULKHEAD_WAIT=300ms"} {
		if !strings.Contains(env, kv) {
			t.Errorf("Env() = %s, want %s", env, kv)
		}
	}
	if note := s.Note(600*time.Millisecond, 0.5, 40); !strings.Contains(note, "p99.9 = 2.82s") || !strings.Contains(note, "p99 = 1.93s") {
		t.Errorf("Note() = %q, want the quantiles named with their values", note)
	}
}

func TestFaultTimes(t *testing.T) {
	t.Parallel()
	s := 1 * time.Second
	flapping := faultTimes{start: s, length: 2 * s, every: 4 * s, repeat: 5}
	once := faultTimes{start: s / 2, length: 3 * s}
	tests := []struct {
		name string
		f    faultTimes
		at   time.Duration
		want bool
	}{
		{"before the first window", flapping, 999 * time.Millisecond, false},
		{"in the first window", flapping, s, true},
		{"between windows", flapping, 3 * s, false},
		{"in the fifth window", flapping, 18*s - 1, true},
		{"after the last window", flapping, 19 * s, false},
		{"once, inside", once, 3 * s, true},
		{"once, at its end", once, 3500 * time.Millisecond, false},
		{"no fault", faultTimes{}, 0, false},
	}
	for _, tt := range tests {
		if got := tt.f.contains(tt.at); got != tt.want {
			t.Errorf("%s: contains(%v) = %v, want %v", tt.name, tt.at, got, tt.want)
		}
	}
	if got, want := flapping.end(), 19*s; got != want {
		t.Errorf("flapping end = %v, want %v", got, want)
	}
	if got, want := once.end(), 3500*time.Millisecond; got != want {
		t.Errorf("one window's end = %v, want %v", got, want)
	}
}

func TestStepSchedule(t *testing.T) {
	t.Parallel()
	got := stepSchedule(60, 20, 10*time.Second, 20*time.Second)
	before, after := 0, 0
	for i, at := range got {
		if i > 0 && at <= got[i-1] {
			t.Fatalf("offset %d (%v) not after %v", i, at, got[i-1])
		}
		if at < 10*time.Second {
			before++
		} else {
			after++
		}
	}
	if before != 600 || after != 200 || got[600] != 10*time.Second || got[len(got)-1] != 19950*time.Millisecond {
		t.Errorf("stepSchedule: %d offsets before 10 s and %d after, the first after at %v, the last at %v; want 600, 200, 10s, 19.95s",
			before, after, got[600], got[len(got)-1])
	}
}

func TestMatrixScenariosAreNamed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sc       Scenario
		wantName string
		wantSpan string
	}{
		{Scenario{Rate: 40, Fault: FaultBrownout, LatencyFactor: 5, OutageStart: Millis(2 * time.Second), OutageFor: Millis(10 * time.Second)},
			"protected, 40 req/s", "5× latency from 2s for 10s"},
		{Scenario{Rate: 40, Fault: FaultErrors, ErrorRate: 0.5, ErrorStatus: 503, OutageStart: Millis(2 * time.Second), OutageFor: Millis(5 * time.Second)},
			"protected, 40 req/s", "50 % answered 503 from 2s for 5s"},
		{Scenario{Rate: 40, Fault: FaultHang, OutageStart: Millis(time.Second), OutageFor: Millis(2 * time.Second), Repeat: 5, RepeatEvery: Millis(4 * time.Second)},
			"protected, 40 req/s", "hang from 1s for 2s, 5 times every 4s"},
		{Scenario{Rate: 60, RateAfter: 20, Fault: FaultDown, OutageFor: Millis(10 * time.Second)},
			"protected, 60 then 20 req/s", "down from 0s for 10s"},
	}
	for _, tt := range tests {
		r := Report{Label: "protected", Scenario: tt.sc}
		if got := r.Name(); got != tt.wantName {
			t.Errorf("Name() = %q, want %q", got, tt.wantName)
		}
		if got := faultSpan(tt.sc); got != tt.wantSpan {
			t.Errorf("faultSpan() = %q, want %q", got, tt.wantSpan)
		}
	}
}
