package experiment

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

const exposition = `# HELP resilience_breaker_state Circuit breaker state: 0 closed, 1 half-open, 2 open.
# TYPE resilience_breaker_state gauge
resilience_breaker_state{name="payment"} 2
resilience_breaker_state{name="inventory"} 0
# HELP resilience_breaker_transitions_total Circuit breaker state changes.
# TYPE resilience_breaker_transitions_total counter
resilience_breaker_transitions_total{from="closed",name="payment",to="open"} 3
resilience_breaker_transitions_total{from="open",name="payment",to="half-open"} 2
resilience_breaker_transitions_total{from="closed",name="inventory",to="open"} 9
# TYPE resilience_concurrency_limit gauge
resilience_concurrency_limit{name="payment"} 9
resilience_concurrency_limit{name="inventory"} 3
# TYPE resilience_bulkhead_in_use gauge
resilience_bulkhead_in_use{name="payment"} 7
# HELP http_pool_in_use HTTP requests being served by the pool.
# TYPE http_pool_in_use gauge
http_pool_in_use{pool="api"} 16
`

func TestParseBreaker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		text      string
		wantFound bool
		wantState string
		wantCount map[string]int
		wantErr   bool
	}{
		{"open, with counters", exposition, true, "open", map[string]int{"closed→open": 3, "open→half-open": 2}, false},
		{"no breaker in this mode", "# TYPE http_pool_in_use gauge\nhttp_pool_in_use{pool=\"api\"} 1\n", false, "", map[string]int{}, false},
		{"half-open", "resilience_breaker_state{name=\"payment\"} 1\n", true, "half-open", map[string]int{}, false},
		{"unknown state", "resilience_breaker_state{name=\"payment\"} 7\n", false, "", nil, true},
		{"not an exposition", "resilience_breaker_state{name=\"payment\" 1\n", false, "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseBreaker(strings.NewReader(tt.text), "payment")
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseBreaker() error = %v, want error %v", err, tt.wantErr)
			}
			if got.found != tt.wantFound || got.state != tt.wantState {
				t.Errorf("parseBreaker() = found %v, state %q; want %v, %q", got.found, got.state, tt.wantFound, tt.wantState)
			}
			if !tt.wantErr && !maps.Equal(got.transitions, tt.wantCount) {
				t.Errorf("transitions = %v, want %v", got.transitions, tt.wantCount)
			}
		})
	}
}

func TestBreakerTracker(t *testing.T) {
	t.Parallel()
	reading := func(state string, counts map[string]int) breakerReading {
		return breakerReading{found: true, state: state, transitions: counts}
	}
	var tr breakerTracker
	// Counters carry a transition from an earlier run, which must not be counted.
	tr.observe(reading("closed", map[string]int{"half-open→closed": 1}), -50*time.Millisecond)
	tr.observe(reading("closed", map[string]int{"half-open→closed": 1}), 0)
	tr.observe(reading("open", map[string]int{"half-open→closed": 1, "closed→open": 1}), 1100*time.Millisecond)
	// Half-open and back to open between two polls: not seen as a state, but counted.
	tr.observe(reading("open", map[string]int{"half-open→closed": 1, "closed→open": 1, "open→half-open": 1, "half-open→open": 1}), 2200*time.Millisecond)
	tr.observe(reading("closed", map[string]int{"half-open→closed": 2, "closed→open": 1, "open→half-open": 2, "half-open→open": 1}), 4*time.Second)

	got := tr.result
	if !got.Observed || got.Initial != "closed" {
		t.Errorf("observed %v, initial %q; want true, closed", got.Observed, got.Initial)
	}
	want := []Transition{
		{At: Millis(1100 * time.Millisecond), From: "closed", To: "open"},
		{At: Millis(4 * time.Second), From: "open", To: "closed"},
	}
	if !slices.Equal(got.Transitions, want) {
		t.Errorf("transitions = %v, want %v", got.Transitions, want)
	}
	wantCounted := map[string]int{"closed→open": 1, "open→half-open": 2, "half-open→open": 1, "half-open→closed": 1}
	if !maps.Equal(got.Counted, wantCounted) {
		t.Errorf("counted = %v, want %v", got.Counted, wantCounted)
	}
}

func TestBreakerTrackerWithoutBreaker(t *testing.T) {
	t.Parallel()
	var tr breakerTracker
	tr.observe(breakerReading{}, 0)
	if tr.result.Observed || len(tr.result.Transitions) != 0 {
		t.Errorf("result = %+v, want nothing observed", tr.result)
	}
}

func TestParseLimit(t *testing.T) {
	t.Parallel()
	got, err := parseBreaker(strings.NewReader(exposition), "payment")
	if err != nil {
		t.Fatal(err)
	}
	if !got.limitFound || got.limit != 9 || got.inFlight != 7 {
		t.Errorf("limit found %v, %d, in flight %d; want true, 9, 7", got.limitFound, got.limit, got.inFlight)
	}
	none, err := parseBreaker(strings.NewReader("http_pool_in_use{pool=\"api\"} 1\n"), "payment")
	if err != nil || none.limitFound {
		t.Errorf("without a limit: found %v, err %v; want false, nil", none.limitFound, err)
	}
}

func TestLimitTracker(t *testing.T) {
	t.Parallel()
	var tr breakerTracker
	for i, l := range []int{4, 4, 6, 3} {
		tr.observe(breakerReading{limitFound: true, limit: l, inFlight: l - 1}, time.Duration(i-1)*50*time.Millisecond)
	}
	tr.observe(breakerReading{found: true, state: "closed"}, 200*time.Millisecond) // a reading without the limit adds no point
	got := tr.limit
	if !got.Observed || len(got.Points) != 4 {
		t.Fatalf("limit = %+v, want 4 points", got)
	}
	if lo, hi := got.Range(); lo != 3 || hi != 6 {
		t.Errorf("Range() = %d, %d; want 3, 6", lo, hi)
	}
	if p := got.Points[2]; p != (LimitPoint{At: Millis(50 * time.Millisecond), Limit: 6, InFlight: 5}) {
		t.Errorf("point 2 = %+v", p)
	}
}

func TestParseCacheLookups(t *testing.T) {
	t.Parallel()
	text := exposition + `# TYPE catalog_cache_lookups_total counter
catalog_cache_lookups_total{result="hit"} 40
catalog_cache_lookups_total{result="stale"} 7
`
	got, err := parseBreaker(strings.NewReader(text), "catalog")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"hit": 40, "stale": 7}; !got.cacheFound || !maps.Equal(got.cache, want) {
		t.Errorf("cache found %v, %v; want true, %v", got.cacheFound, got.cache, want)
	}
	none, err := parseBreaker(strings.NewReader(exposition), "payment")
	if err != nil || none.cacheFound {
		t.Errorf("without a catalog: cache found %v, err %v; want false, nil", none.cacheFound, err)
	}
}

// TestCacheTracker: the run's lookups are the counters' increase from the first reading, so
// an earlier run's lookups on the same checkout are not counted.
func TestCacheTracker(t *testing.T) {
	t.Parallel()
	var tr breakerTracker
	tr.observe(breakerReading{cacheFound: true, cache: map[string]int{"hit": 10, "miss": 4}}, -50*time.Millisecond)
	tr.observe(breakerReading{cacheFound: true, cache: map[string]int{"hit": 30, "miss": 4, "stale": 12}}, time.Second)
	tr.observe(breakerReading{cacheFound: true, cache: map[string]int{"hit": 31, "miss": 6, "stale": 20, "unavailable": 3}}, 2*time.Second)
	want := map[string]int{"hit": 21, "miss": 2, "stale": 20, "unavailable": 3}
	if !tr.cache.Observed || !maps.Equal(tr.cache.Lookups, want) {
		t.Errorf("cache = %+v, want observed lookups %v", tr.cache, want)
	}
	var without breakerTracker
	without.observe(breakerReading{found: true, state: "closed"}, 0)
	if without.cache.Observed {
		t.Error("a checkout without a catalog cache: cache observed")
	}
}

// TestBreakerSources: a breaker forced open by an operator, or imposed by another process's,
// keeps its own state closed; only resilience_breaker_source says who refused the calls, and
// the report must say it rather than "stayed closed".
func TestBreakerSources(t *testing.T) {
	t.Parallel()
	const text = `resilience_breaker_state{name="payment"} 0
resilience_breaker_source{name="payment",source="local"} 0
resilience_breaker_source{name="payment",source="fleet"} 1
resilience_breaker_source{name="payment",source="forced"} 0
resilience_breaker_source{name="catalog",source="forced"} 1
`
	got, err := parseBreaker(strings.NewReader(text), "payment")
	if err != nil || got.source != "fleet" {
		t.Fatalf("parseBreaker() = source %q, %v; want fleet", got.source, err)
	}

	reading := func(source string) breakerReading {
		return breakerReading{found: true, state: "closed", source: source, transitions: map[string]int{}}
	}
	var tr breakerTracker
	tr.observe(reading("local"), 0)
	tr.observe(reading("fleet"), 1150*time.Millisecond)
	tr.observe(reading("local"), 5*time.Second)
	want := []SourceChange{
		{At: Millis(1150 * time.Millisecond), From: "local", To: "fleet"},
		{At: Millis(5 * time.Second), From: "fleet", To: "local"},
	}
	if !slices.Equal(tr.result.Sources, want) {
		t.Errorf("sources = %v, want %v", tr.result.Sources, want)
	}
	if got, want := breakerCell(tr.result), "fleet-imposed at 1.15 s"; got != want {
		t.Errorf("breaker cell = %q, want %q", got, want)
	}
	if got := transitions(tr.result, TargetPayment); !strings.Contains(got, "decided by fleet from 1.15 s") {
		t.Errorf("transitions = %q, want the fleet's imposition named", got)
	}

	var forced breakerTracker
	forced.observe(reading("forced"), 0)
	if got, want := breakerCell(forced.result), "forced open"; got != want {
		t.Errorf("forced from the start: breaker cell = %q, want %q", got, want)
	}
}
