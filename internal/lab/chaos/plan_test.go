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

// TestPlanHoldsAFailover: every plan of the short soak's length or more
// holds a failover, promoted about a second after the kill, and keeps every
// other process and database fault away from it and from the rebuild of
// the standby after it; the plan is in time order.
func TestPlanHoldsAFailover(t *testing.T) {
	t.Parallel()
	for seed := range uint64(50) {
		for _, d := range []time.Duration{30 * time.Second, 2 * time.Minute, 5 * time.Minute} {
			plan := NewPlan(PlanConfig{Seed: seed, Duration: d, Workers: 2})
			if !slices.IsSortedFunc(plan, func(a, b Event) int { return int(a.At - b.At) }) {
				t.Errorf("seed %d, %v: the plan is not in time order", seed, d)
			}
			failovers := 0
			for _, e := range plan {
				if e.Kind != Failover {
					continue
				}
				failovers++
				if e.For < failoverMin || e.For > failoverMax {
					t.Errorf("seed %d, %v: %v promotes %v after the kill, want %v to %v", seed, d, e, e.For, failoverMin, failoverMax)
				}
				if e.End()+FailoverRebuild > d {
					t.Errorf("seed %d, %v: failover at %v leaves no time to rebuild the standby", seed, d, e.At)
				}
				for _, p := range plan {
					if p != e && !p.Kind.Provider() && p.At < e.End()+FailoverRebuild && e.At < p.busyUntil() {
						t.Errorf("seed %d, %v: %v at %v overlaps the failover at %v or its rebuild", seed, d, p, p.At, e.At)
					}
				}
			}
			if failovers == 0 {
				t.Errorf("seed %d, %v: no failover", seed, d)
			}
		}
	}
	if plan := NewPlan(PlanConfig{Seed: 1, Duration: 10 * time.Second, Workers: 2}); slices.ContainsFunc(plan, func(e Event) bool { return e.Kind == Failover }) {
		t.Error("a 10 s plan holds a failover: too short to rebuild the standby after it")
	}
}
