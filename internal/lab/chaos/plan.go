// Package chaos is the soak behind `make chaos`: a seeded plan of faults
// (Plan), an open-loop order load with replays and declines (Load), and the
// audit of Postgres against the provider's ledger once everything healed
// (Audit). It knows the services only from outside — their HTTP APIs and the
// orders table — as a customer, an operator and an accountant would.
//
// The processes themselves (real binaries, a PostgreSQL cluster of its own
// that the soak crashes, a TCP proxy in front of it) are started by the
// soak in e2e/chaos_test.go, which applies the plan's events to them.
package chaos

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is a fault the soak can inject.
type Kind string

// Provider faults go through the simulator's admin API; process faults are
// done to processes and the database.
const (
	ProviderLatency       Kind = "provider_latency"
	ProviderErrorRate     Kind = "provider_error_rate"
	ProviderHang          Kind = "provider_hang"
	ProviderDown          Kind = "provider_down"
	ProviderRefuse        Kind = "provider_refuse_connections"
	ProviderLostResponses Kind = "provider_reset_after_charge"

	KillCheckout  Kind = "kill_checkout"  // SIGKILL, restarted after For
	KillWorker    Kind = "kill_worker"    // SIGKILL of worker Target, restarted after For
	StopWorker    Kind = "sigterm_worker" // SIGTERM (graceful stop) of worker Target, restarted after For
	CrashPostgres Kind = "crash_postgres" // pg_ctl stop -m immediate, started again after For
	CutDatabase   Kind = "cut_database"   // the TCP proxies in front of Postgres blackhole for For
	// Failover kills the primary (pg_ctl stop -m immediate) and promotes its
	// synchronous standby For later; the old primary never writes again; it
	// is rebuilt as the new primary's standby within FailoverRebuild.
	Failover Kind = "failover"
)

// FailoverRebuild is how long after a failover's promotion the plan keeps
// other process and database faults away: the soak makes the old primary a
// synchronous standby of the new one in that time (pg_basebackup into a
// fresh directory), and a crash of the primary meanwhile would find no
// standby to wait for.
const FailoverRebuild = 8 * time.Second

// Provider reports whether k is injected through the simulator.
func (k Kind) Provider() bool {
	switch k {
	case ProviderLatency, ProviderErrorRate, ProviderHang, ProviderDown, ProviderRefuse, ProviderLostResponses:
		return true
	}
	return false
}

// kinds is what NewPlan draws from, each equally likely.
var kinds = []Kind{
	ProviderLatency, ProviderErrorRate, ProviderHang, ProviderDown, ProviderRefuse, ProviderLostResponses,
	KillCheckout, KillWorker, StopWorker, CrashPostgres, CutDatabase, Failover,
}

// Event is one fault: applied At (from the soak's start), healed For later.
type Event struct {
	At   time.Duration
	For  time.Duration
	Kind Kind
	// Target is the worker a worker fault hits.
	Target int
	// Latency and ErrorRate parametrise ProviderLatency and ProviderErrorRate.
	Latency   time.Duration
	ErrorRate float64
}

// End is when the event is healed.
func (e Event) End() time.Duration { return e.At + e.For }

// busyUntil is when the event stops occupying the system: its End, and for
// a failover the rebuild of the standby after it.
func (e Event) busyUntil() time.Duration {
	if e.Kind == Failover {
		return e.End() + FailoverRebuild
	}
	return e.End()
}

func (e Event) String() string {
	s := fmt.Sprintf("%-28s for %v", e.Kind, e.For.Round(time.Millisecond))
	switch e.Kind {
	case ProviderLatency:
		s += fmt.Sprintf(" (+%v per charge)", e.Latency)
	case ProviderErrorRate:
		s += fmt.Sprintf(" (%.0f%% answered 500)", e.ErrorRate*100)
	case KillWorker, StopWorker:
		s += fmt.Sprintf(" (worker %d)", e.Target)
	}
	return s
}

// FaultJSON is the body of the simulator's POST /admin/faults for a provider
// event; the simulator ends the fault itself after For.
func (e Event) FaultJSON() string {
	var fault string
	switch e.Kind {
	case ProviderLatency:
		fault = fmt.Sprintf(`"latency":%q`, e.Latency.String())
	case ProviderErrorRate:
		fault = fmt.Sprintf(`"error_rate":%.2f`, e.ErrorRate)
	case ProviderHang:
		fault = `"hang":true`
	case ProviderDown:
		fault = `"down":true`
	case ProviderRefuse:
		fault = `"refuse_connections":true`
	case ProviderLostResponses:
		fault = `"reset_after_charge":true`
	default:
		panic("chaos: not a provider fault: " + string(e.Kind))
	}
	return fmt.Sprintf(`{%s,"duration":%q}`, fault, e.For.String())
}

// MaxLatency is the most latency a ProviderLatency event adds to a charge.
// The soak's LOOKUP_AFTER must exceed the longest a charge can then take at
// the provider (see the soak), so it is kept modest: enough to push every
// call past the 500 ms attempt timeout, so the provider charges what its
// callers gave up on.
const MaxLatency = time.Second

// PlanConfig shapes a plan.
type PlanConfig struct {
	Seed     uint64
	Duration time.Duration
	Workers  int // worker processes a worker fault may hit
}

// NewPlan draws the soak's faults from the seed alone, so a seed names a
// run: a fault every 1–4 s from t = 2 s, at most two at once and at most one
// of them done to a process or the database (two at once would mostly show
// that nothing works with the database and checkout both gone). Every fault
// is healed by Duration.
//
// Every plan long enough for one holds a failover, placed between a sixth
// and a third of its length before the random faults are drawn around it:
// the soak pays for a synchronous standby in every run, and the short soak
// of `make test` (30 s, where a fault drawn among twelve kinds might never
// come up) is what exercises the failover on every change. Early, because
// the charge jobs running at the kill stay running until River rescues
// them (RESCUE_STUCK_JOBS_AFTER, 31 s in the soak): that wait then passes
// during the soak rather than after it. More may be drawn.
func NewPlan(cfg PlanConfig) []Event {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x636861_6f73)) // "chaos"
	dur := func(lo, hi time.Duration) time.Duration {
		return (lo + time.Duration(rng.Int64N(int64(hi-lo)+1))).Round(100 * time.Millisecond)
	}
	var plan []Event
	lo, hi := cfg.Duration/6, min(cfg.Duration/3, cfg.Duration-failoverMax-FailoverRebuild)
	if lo >= 2*time.Second && hi >= lo {
		plan = append(plan, Event{At: dur(lo, hi), Kind: Failover, For: dur(failoverMin, failoverMax)})
	}
	for at := 2 * time.Second; ; at += dur(time.Second, 4*time.Second) {
		e := Event{At: at, Kind: kinds[rng.IntN(len(kinds))]}
		switch e.Kind {
		case KillCheckout, KillWorker, StopWorker:
			e.For = dur(500*time.Millisecond, 3*time.Second) // down until restarted
		case CrashPostgres:
			e.For = dur(time.Second, 4*time.Second)
		case CutDatabase:
			e.For = dur(2*time.Second, 5*time.Second)
		case Failover:
			e.For = dur(failoverMin, failoverMax) // the promotion, about a second after the kill
		default:
			e.For = dur(2*time.Second, 6*time.Second)
		}
		switch e.Kind {
		case ProviderLatency:
			e.Latency = dur(300*time.Millisecond, MaxLatency)
		case ProviderErrorRate:
			e.ErrorRate = float64(rng.IntN(5)+2) / 10 // 20–60 %
		case KillWorker, StopWorker:
			e.Target = rng.IntN(max(cfg.Workers, 1))
		}
		if e.busyUntil() > cfg.Duration {
			break
		}
		if fits(plan, e) {
			plan = append(plan, e)
		}
	}
	slices.SortStableFunc(plan, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return plan
}

// The promotion follows the kill of the primary by about a second.
const failoverMin, failoverMax = 800 * time.Millisecond, 1500 * time.Millisecond

// fits reports whether e can join plan: at most two faults at once, at most
// one of them not the provider's, and none but the provider's while the
// standby is rebuilt after a failover.
func fits(plan []Event, e Event) bool {
	active, processes := 0, 0
	for _, p := range plan {
		if p.At < e.End() && e.At < p.End() {
			active++
		}
		if !p.Kind.Provider() && p.At < e.busyUntil() && e.At < p.busyUntil() {
			processes++
		}
	}
	return active < 2 && (e.Kind.Provider() || processes == 0)
}
