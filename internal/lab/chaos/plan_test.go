package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanIsTheSeeds(t *testing.T) {
	t.Parallel()
	cfg := PlanConfig{Seed: 1, Duration: 5 * time.Minute, Workers: 2}
	if a, b := NewPlan(cfg), NewPlan(cfg); !slices.Equal(a, b) {
		t.Error("two plans from one seed differ: a seed must name a run")
	}
	other := cfg
	other.Seed = 2
	if slices.Equal(NewPlan(cfg), NewPlan(other)) {
		t.Error("seeds 1 and 2 give the same plan")
	}
}

// TestPlanKeepsFaultsApart: at most two faults at once, at most one of them
// a process's or the database's, each healed by the end, and the default
// soak (seed 1, 5 minutes) injects every kind of fault.
func TestPlanKeepsFaultsApart(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		cfg := PlanConfig{Seed: seed, Duration: 5 * time.Minute, Workers: 2}
		plan := NewPlan(cfg)
		for _, e := range plan {
			if e.At < 0 || e.For <= 0 || e.End() > cfg.Duration {
				t.Errorf("seed %d: %v at %v ends at %v, outside the soak's %v", seed, e, e.At, e.End(), cfg.Duration)
			}
			if (e.Kind == KillWorker || e.Kind == StopWorker) && (e.Target < 0 || e.Target >= cfg.Workers) {
				t.Errorf("seed %d: %v targets worker %d of %d", seed, e, e.Target, cfg.Workers)
			}
			// The most faults at once over e's lifetime is reached at the
			// start of e or of a fault overlapping it.
			for _, at := range starts(plan, e) {
				active, processes := 0, 0
				for _, p := range plan {
					if p.At <= at && at < p.End() {
						active++
						if !p.Kind.Provider() {
							processes++
						}
					}
				}
				if active > 2 || processes > 1 {
					t.Errorf("seed %d: at %v, %d faults active, %d of them process faults; want at most 2 and 1", seed, at, active, processes)
				}
			}
		}
	}
	seen := map[Kind]bool{}
	for _, e := range NewPlan(PlanConfig{Seed: 1, Duration: 5 * time.Minute, Workers: 2}) {
		seen[e.Kind] = true
	}
	for _, k := range kinds {
		if !seen[k] {
			t.Errorf("the default soak (seed 1, 5 min) never injects %s", k)
		}
	}
}

func starts(plan []Event, e Event) []time.Duration {
	at := []time.Duration{e.At}
	for _, p := range plan {
		if p.At >= e.At && p.At < e.End() {
			at = append(at, p.At)
		}
	}
	return at
}

func TestFaultJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e    Event
		want string
	}{
		{Event{Kind: ProviderLatency, Latency: 700 * time.Millisecond, For: 3 * time.Second}, `{"latency":"700ms","duration":"3s"}`},
		{Event{Kind: ProviderErrorRate, ErrorRate: 0.3, For: 2500 * time.Millisecond}, `{"error_rate":0.30,"duration":"2.5s"}`},
		{Event{Kind: ProviderLostResponses, For: time.Second}, `{"reset_after_charge":true,"duration":"1s"}`},
		{Event{Kind: ProviderRefuse, For: time.Second}, `{"refuse_connections":true,"duration":"1s"}`},
	}
	for _, tt := range tests {
		if got := tt.e.FaultJSON(); got != tt.want {
			t.Errorf("%s: FaultJSON() = %s, want %s", tt.e.Kind, got, tt.want)
		}
	}
	for _, k := range kinds {
		if k.Provider() && !strings.Contains(Event{Kind: k, Latency: time.Second, ErrorRate: 0.5}.FaultJSON(), `"duration"`) {
			t.Errorf("%s: fault without a duration: the simulator would keep it until cleared", k)
		}
	}
}
