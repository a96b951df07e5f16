package experiment

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is one run's result. It is what the JSON file holds; WriteMarkdown and WriteSVG
// render it.
type Report struct {
	Label string `json:"label"`
	// Row and Note are the scenario-matrix row the run belongs to and what the matrix says
	// about it (Config.Row, Config.Note); empty outside the matrix.
	Row       string    `json:"row,omitempty"`
	Note      string    `json:"note,omitempty"`
	StartedAt time.Time `json:"started_at"`
	Scenario  Scenario  `json:"scenario"`

	// Checkout summarises POST /orders over the whole run, during the fault window, and
	// outside it (while the provider was healthy or recovering).
	Checkout Phases `json:"checkout"`
	// Health summarises the /health probes the same way.
	Health Phases `json:"health"`
	// Breaker is the faulted dependency's breaker in checkout (Scenario.FaultTarget names it).
	Breaker Breaker `json:"breaker"`
	// Limit is that policy's concurrency limit over the run, read with the breaker.
	Limit Limit `json:"limit"`
	// Cache is checkout's catalog price cache over the run, when checkout has one.
	Cache Cache `json:"cache"`
	Audit Audit `json:"audit"`
	// Recovery is what followed the fault, for runs that fault the payment provider.
	Recovery *Recovery `json:"recovery,omitempty"`

	// WorstLag is the latest any request went out; a run is only reported when it is within
	// Scenario.MaxLag.
	WorstLag Millis   `json:"worst_lag_ms"`
	Samples  []Sample `json:"samples"`
}

// Scenario is the part of Config a report needs to be read and drawn.
type Scenario struct {
	Rate          float64   `json:"rate"`
	RateTo        float64   `json:"rate_to,omitempty"` // the ramp's end rate; 0 for a constant rate
	Duration      Millis    `json:"duration_ms"`
	OutageStart   Millis    `json:"outage_start_ms"`
	OutageFor     Millis    `json:"outage_for_ms"`
	FaultTarget   Target    `json:"fault_target,omitempty"` // empty in reports from before the catalog: payment
	Fault         FaultKind `json:"fault"`
	OutageLatency Millis    `json:"outage_latency_ms,omitempty"`
	LatencyFactor float64   `json:"latency_factor,omitempty"` // a brownout's
	ErrorRate     float64   `json:"error_rate,omitempty"`     // an error burst's, with ErrorStatus
	ErrorStatus   int       `json:"error_status,omitempty"`
	// Repeat and RepeatEvery are a flapping fault's windows (Config.Repeat); 0 for one window.
	Repeat      int    `json:"repeat,omitempty"`
	RepeatEvery Millis `json:"repeat_every_ms,omitempty"`
	// RateAfter is the rate from the fault's end on (Config.RateAfter); 0 for Rate throughout.
	RateAfter      float64 `json:"rate_after,omitempty"`
	RequestTimeout Millis  `json:"request_timeout_ms"`
	HealthInterval Millis  `json:"health_interval_ms"`
	HealthTimeout  Millis  `json:"health_timeout_ms"`
	MaxLag         Millis  `json:"max_lag_ms"`
}

// Phases splits a probe's samples by when they were due.
type Phases struct {
	All     Summary `json:"all"`
	Outage  Summary `json:"outage"`
	Healthy Summary `json:"healthy"`
}

func newReport(cfg Config, start time.Time, samples []Sample, lag time.Duration, b Breaker, l Limit, c Cache, a Audit) Report {
	phases := func(p Probe) Phases {
		during := func(s Sample) bool { return cfg.inOutage(time.Duration(s.At)) }
		return Phases{
			All:     summarize(samples, p, func(Sample) bool { return true }),
			Outage:  summarize(samples, p, during),
			Healthy: summarize(samples, p, func(s Sample) bool { return !during(s) }),
		}
	}
	sc := Scenario{
		Rate: cfg.Rate, RateTo: cfg.RateTo, Duration: Millis(cfg.Duration), OutageStart: Millis(cfg.OutageStart),
		OutageFor: Millis(cfg.OutageFor), FaultTarget: cfg.target(), Fault: cfg.Fault, RequestTimeout: Millis(cfg.RequestTimeout),
		HealthInterval: Millis(cfg.HealthInterval), HealthTimeout: Millis(cfg.HealthTimeout), MaxLag: Millis(cfg.MaxLag),
	}
	switch cfg.Fault {
	case FaultLatency:
		sc.OutageLatency = Millis(cfg.OutageLatency)
	case FaultBrownout:
		sc.LatencyFactor = cfg.LatencyFactor
	case FaultErrors:
		sc.ErrorRate, sc.ErrorStatus = cfg.ErrorRate, cfg.ErrorStatus
	}
	if cfg.Repeat > 1 {
		sc.Repeat, sc.RepeatEvery = cfg.Repeat, Millis(cfg.RepeatEvery)
	}
	sc.RateAfter = cfg.RateAfter
	return Report{
		Label: cfg.Label, Row: cfg.Row, Note: cfg.Note, StartedAt: start.UTC(), Scenario: sc,
		Checkout: phases(ProbeCheckout), Health: phases(ProbeHealth),
		Breaker: b, Limit: l, Cache: c, Audit: a, WorstLag: Millis(lag), Samples: samples,
	}
}

// active returns when the fault was active.
func (s Scenario) active() faultTimes {
	if s.Fault == FaultNone {
		return faultTimes{}
	}
	return faultTimes{start: time.Duration(s.OutageStart), length: time.Duration(s.OutageFor), every: time.Duration(s.RepeatEvery), repeat: s.Repeat}
}

// target returns the faulted dependency, TargetPayment for reports that do not say.
func (s Scenario) target() Target { return cmp.Or(s.FaultTarget, TargetPayment) }

// dependency is how text names the faulted dependency: "provider" or "catalog".
func (s Scenario) dependency() string {
	if s.target() == TargetCatalog {
		return "catalog"
	}
	return "provider"
}

// Name is how tables and figures refer to the run, e.g. "protected, 20 req/s",
// "protected, 10→80 req/s" for a ramp, or "protected, 60 then 20 req/s" for a backlog built
// during the fault.
func (r Report) Name() string {
	rate := strconv.FormatFloat(r.Scenario.Rate, 'f', -1, 64)
	switch {
	case r.Scenario.RateTo > 0:
		rate += "→" + strconv.FormatFloat(r.Scenario.RateTo, 'f', -1, 64)
	case r.Scenario.RateAfter > 0:
		rate += " then " + strconv.FormatFloat(r.Scenario.RateAfter, 'f', -1, 64)
	}
	rate += " req/s"
	if r.Label == "" {
		return rate
	}
	return r.Label + ", " + rate
}

// WriteMarkdown writes one table with a row per report, followed by the breaker transitions
// and any caveat (an unfinished drain) per run, so several runs compare at a glance. Runs that
// fault the catalog get a table of their own after the payment runs', with the columns that
// tell a stale-cache fallback from an outage: answers marked stale, 5xx, 503s with and without
// Retry-After, and the cache's lookups.
func WriteMarkdown(w io.Writer, reports ...Report) error {
	var payment, catalog []Report
	for _, r := range reports {
		if r.Scenario.target() == TargetCatalog {
			catalog = append(catalog, r)
		} else {
			payment = append(payment, r)
		}
	}
	var b strings.Builder
	if len(payment) > 0 {
		writePaymentTable(&b, payment)
	}
	if len(catalog) > 0 {
		if len(payment) > 0 {
			b.WriteString("\n")
		}
		writeCatalogTable(&b, catalog)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writePaymentTable(b *strings.Builder, reports []Report) {
	b.WriteString("| run | /health failures (outage) | /health p50 / p95 (outage) | checkout outcomes (outage) | checkout p50 / p95 (outage) | checkout outcomes (healthy) | provider max in-flight (outage / run) | breaker | payment limit (low–high) | accepted | paid | still pending | lost | charged twice |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range reports {
		h, c, a := r.Health.Outage, r.Checkout, r.Audit
		fmt.Fprintf(b, "| %s | %s | %s / %s | %s | %s / %s | %s | %d / %d | %s | %s | %d | %d | %d | %d | %d |\n",
			r.Name(), healthFailures(h), ms(h.P50), ms(h.P95),
			outcomes(c.Outage), ms(c.Outage.P50), ms(c.Outage.P95), outcomes(c.Healthy),
			a.ProviderMaxInFlightOutage, a.ProviderMaxInFlight, breakerCell(r.Breaker), limitCell(r.Limit),
			a.Accepted, a.Paid, a.StillPending, len(a.Lost), a.DoubleCharged)
	}
	b.WriteString("\nOutage: requests due inside the fault window; healthy: those due outside it. Accepted: orders answered " +
		"201 or 202. Provider max in-flight: the most charges the provider held at once while the fault was active (what " +
		"piled up on it), then over the whole run (hung calls still held while recovery and drain traffic arrive). Paid and still pending: every order of the run in Postgres after the drain, including those whose client " +
		"got a 5xx or gave up. Lost: orders answered 201, 202 or 402 but missing from Postgres. Charged twice: from the " +
		"provider's ledger. Payment limit: the lowest and highest concurrency limit read from checkout's /metrics " +
		"during the run.\n\n")
	runNotes(b, reports)
}

func writeCatalogTable(b *strings.Builder, reports []Report) {
	b.WriteString("| run | catalog | checkout outcomes (outage) | checkout outcomes (rest) | marked stale (outage / run) | 5xx (outage / run) | 503 with / without Retry-After (run) | checkout p50 / p95 (outage) | /health failures (outage) | /health p95 (outage) | catalog breaker | cache lookups (run) | accepted | lost |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range reports {
		c, h := r.Checkout, r.Health.Outage
		fmt.Fprintf(b, "| %s | %s | %s | %s | %d / %d | %d / %d | %d / %d | %s / %s | %s | %s | %s | %s | %d | %d |\n",
			r.Name(), faultSpan(r.Scenario), outcomes(c.Outage), outcomes(c.Healthy),
			c.Outage.Stale, c.All.Stale, c.Outage.ServerErrors(), c.All.ServerErrors(),
			c.All.Unavailable, c.All.UnavailableBare, ms(c.Outage.P50), ms(c.Outage.P95),
			healthFailures(h), ms(h.P95), breakerCell(r.Breaker), cacheCell(r.Cache), r.Audit.Accepted, len(r.Audit.Lost))
	}
	b.WriteString("\nOutage: requests due while the catalog was faulted; rest: those due before or after. Marked stale: " +
		"answers carrying `Catalog-Prices: stale`, checked against cached prices because the catalog was unavailable. " +
		"503 with / without Retry-After: every 503 of the run, by whether it told the client when to come back. " +
		"Cache lookups: the increase of checkout's catalog_cache_lookups_total during the run, one per SKU checked. " +
		"Accepted: orders answered 201 or 202; lost: those missing from Postgres.\n\n")
	runNotes(b, reports)
}

// counted is n with noun, plural unless n is 1: "1 lookup", "5 charges".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// runNotes writes a line per run: the breaker's transitions, the fault, the worst lag, and an
// unfinished drain.
func runNotes(b *strings.Builder, reports []Report) {
	for _, r := range reports {
		fmt.Fprintf(b, "- **%s**: %s. %s %s; load went out at most %s late.",
			r.Name(), transitions(r.Breaker, r.Scenario.target()), capitalized(r.Scenario.dependency()), faultSpan(r.Scenario), ms(r.WorstLag))
		if rec := r.Recovery; rec != nil {
			fmt.Fprintf(b, " After the fault: %s and %s sent into it; %d of %d orders sent from %s after it answered 201 (%.0f %%); the last acknowledged order paid %s after it.",
				counted(rec.ChargesDuringFault, "charge"), counted(rec.LookupsDuringFault, "lookup"), rec.LiveCharged, rec.Live, seconds(rec.LiveAfter), 100*rec.LiveShare(), paidCell(rec.LastPaid))
			if rec.Backlog > 0 {
				fmt.Fprintf(b, " Backlog: %d orders, paid %s after it", rec.Backlog, paidCell(rec.BacklogPaid))
				if rec.IdealDrain > 0 {
					fmt.Fprintf(b, " (ideal %s: backlog / (%d / %s − %s/s))", seconds(rec.IdealDrain), rec.Capacity, ms(rec.ProviderLatency),
						strconv.FormatFloat(r.Scenario.liveRate(), 'f', -1, 64))
				}
				b.WriteString(".")
			}
			if rec.Capacity > 0 {
				fmt.Fprintf(b, " %d of %d charges (%.1f %%) began above the provider's capacity of %d.",
					rec.ChargesOverCapacity, rec.ChargesProcessed, 100*rec.OverCapacityShare(), rec.Capacity)
			}
			if lo, hi, slots, ok := rec.WorkersAfter(r.Scenario); ok {
				fmt.Fprintf(b, " The workers' payment limit after the fault, the highest each second: %d–%d; at most %d of its slots taken.", lo, hi, slots)
			} else if rec.WorkerPollErrors > 0 {
				fmt.Fprintf(b, " The workers' limits could not be read after the fault (%d readings failed).", rec.WorkerPollErrors)
			}
		}
		if !r.Audit.Drained {
			fmt.Fprintf(b, " **Not drained** after %s: %d orders still pending — the worker did not settle them in time.",
				seconds(r.Audit.DrainWait), r.Audit.StillPending)
		}
		b.WriteString("\n")
	}
}

func capitalized(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// cacheResults are catalog_cache_lookups_total's results, in the order a cell lists them.
var cacheResults = []string{"hit", "miss", "stale", "unavailable"}

// cacheCell lists the cache's lookups by result, e.g. "350 hit, 12 miss, 180 stale, 0 unavailable".
func cacheCell(c Cache) string {
	if !c.Observed {
		return "none"
	}
	parts := make([]string, len(cacheResults))
	for i, res := range cacheResults {
		parts[i] = fmt.Sprintf("%d %s", c.Lookups[res], res)
	}
	return strings.Join(parts, ", ")
}

// outcomes lists a summary's outcomes, most frequent first, e.g. "43×503, 15×504".
func outcomes(s Summary) string {
	if s.Count == 0 {
		return "—"
	}
	keys := sortedOutcomes(s.Outcomes)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%s", s.Outcomes[k], k)
	}
	return strings.Join(parts, ", ")
}

// healthFailures counts the probes that did not get 200, e.g. "8/12 (8×timeout)": a 503
// from a saturated pool is as much a failed liveness probe as a timeout.
func healthFailures(s Summary) string {
	failed := maps.Clone(s.Outcomes)
	delete(failed, "200")
	n := 0
	for _, c := range failed {
		n += c
	}
	if n == 0 {
		return fmt.Sprintf("0/%d", s.Count)
	}
	return fmt.Sprintf("%d/%d (%s)", n, s.Count, outcomes(Summary{Count: n, Outcomes: failed}))
}

// sortedOutcomes orders outcomes by count, most frequent first, then by name.
func sortedOutcomes(counts map[string]int) []string {
	return slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
	})
}

func limitCell(l Limit) string {
	if !l.Observed {
		return "none"
	}
	lo, hi := l.Range()
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

func breakerCell(b Breaker) string {
	if !b.Observed {
		return "none"
	}
	for _, t := range b.Transitions {
		if t.To == "open" {
			return "opened at " + seconds(t.At)
		}
	}
	if b.InitialSource == "forced" {
		return "forced open"
	}
	for _, c := range b.Sources {
		if c.To != "local" {
			return c.To + "-imposed at " + seconds(c.At)
		}
	}
	return "stayed " + b.Initial
}

func transitions(b Breaker, policy Target) string {
	if !b.Observed {
		return "no " + string(policy) + " breaker exported"
	}
	var sources string
	if b.InitialSource != "" && b.InitialSource != "local" {
		sources = "; decided by " + b.InitialSource + " from the start"
	}
	for _, c := range b.Sources {
		sources += fmt.Sprintf("; decided by %s from %s", c.To, seconds(c.At))
	}
	if len(b.Transitions) == 0 {
		return "breaker stayed " + b.Initial + sources
	}
	parts := make([]string, len(b.Transitions))
	for i, t := range b.Transitions {
		parts[i] = fmt.Sprintf("%s→%s at %s", t.From, t.To, seconds(t.At))
	}
	return "breaker " + strings.Join(parts, ", ") + sources
}

// faultSpan says what the faulted dependency did and when, e.g. "+10s latency from 500ms for
// 3s", or "hang from 1s for 2s, 5 times every 4s".
func faultSpan(s Scenario) string {
	if s.Fault == FaultNone {
		return fault(s) + " throughout"
	}
	text := fmt.Sprintf("%s from %v for %v", fault(s), time.Duration(s.OutageStart), time.Duration(s.OutageFor))
	if s.Repeat > 1 {
		text += fmt.Sprintf(", %d times every %v", s.Repeat, time.Duration(s.RepeatEvery))
	}
	return text
}

func fault(s Scenario) string {
	switch s.Fault {
	case FaultNone:
		return "healthy"
	case FaultLatency:
		return "+" + time.Duration(s.OutageLatency).String() + " latency"
	case FaultBrownout:
		return strconv.FormatFloat(s.LatencyFactor, 'f', -1, 64) + "× latency"
	case FaultErrors:
		return fmt.Sprintf("%s %% answered %d", strconv.FormatFloat(100*s.ErrorRate, 'f', -1, 64), s.ErrorStatus)
	}
	return string(s.Fault)
}

// liveRate is the rate of the orders sent after the fault.
func (s Scenario) liveRate() float64 { return cmp.Or(s.RateAfter, s.Rate) }

// paidCell is a Recovery time, or "never" for NeverPaid.
func paidCell(d Millis) string {
	if d == NeverPaid {
		return "never"
	}
	return seconds(d)
}

// ms formats a latency for a table: whole milliseconds, or tenths below 10 ms where the
// difference matters (the article's /health p50 is 2 ms).
func ms(d Millis) string {
	v := float64(d) / float64(time.Millisecond)
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " ms"
}

func seconds(d Millis) string {
	return strconv.FormatFloat(time.Duration(d).Seconds(), 'f', 2, 64) + " s"
}
