package experiment

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Breaker states as resilience_breaker_state exports them (0, 1, 2).
var breakerStates = []string{"closed", "half-open", "open"}

// Breaker is what a run saw of the breaker of checkout's policy for the faulted dependency
// (its name label is the Target: payment or catalog).
type Breaker struct {
	// Observed is false when checkout exports no such breaker (modes none and timeout).
	Observed bool   `json:"observed"`
	Initial  string `json:"initial,omitempty"`
	// Transitions are the state changes seen by polling /metrics; a change and its reversal
	// within one polling interval is missed here, but counted in Counted.
	Transitions []Transition `json:"transitions"`
	// Counted is the increase of resilience_breaker_transitions_total during the run, by
	// "from→to".
	Counted map[string]int `json:"counted"`
	// PollErrors counts /metrics reads that failed.
	PollErrors int `json:"poll_errors"`
	// InitialSource and Sources are who decided the breaker's state — local (this process's
	// own breaker), fleet (imposed by another process's) or forced (an operator) — at the first
	// reading and at each change (resilience_breaker_source); the state above is the local
	// breaker's alone, so a forced or fleet-imposed open state shows only here.
	InitialSource string         `json:"initial_source,omitempty"`
	Sources       []SourceChange `json:"sources,omitempty"`
}

// SourceChange is a change of who decides the breaker's state, at an offset from the run's start.
type SourceChange struct {
	At   Millis `json:"at_ms"`
	From string `json:"from"`
	To   string `json:"to"`
}

// Transition is a breaker state change, at an offset from the run's start.
type Transition struct {
	At   Millis `json:"at_ms"`
	From string `json:"from"`
	To   string `json:"to"`
}

// Limit is what a run saw of the concurrency limit of checkout's policy for the faulted
// dependency, one point per /metrics read.
type Limit struct {
	// Observed is false when checkout exports no limit (modes none and timeout).
	Observed bool         `json:"observed"`
	Points   []LimitPoint `json:"points,omitempty"`
}

// LimitPoint is the limit and the calls holding its slots, at an offset from the run's start.
type LimitPoint struct {
	At       Millis `json:"at_ms"`
	Limit    int    `json:"limit"`
	InFlight int    `json:"in_flight"`
}

// Range returns the lowest and highest limit seen during the run (offsets from 0 on).
func (l Limit) Range() (lo, hi int) {
	first := true
	for _, p := range l.Points {
		if p.At < 0 {
			continue
		}
		if first {
			lo, hi, first = p.Limit, p.Limit, false
		}
		lo, hi = min(lo, p.Limit), max(hi, p.Limit)
	}
	return lo, hi
}

// Cache is what a run saw of checkout's catalog price cache: the increase of
// catalog_cache_lookups_total during the run, by result (hit, miss, stale, unavailable; each
// SKU of an order's check counts once).
type Cache struct {
	// Observed is false when checkout exports no cache: it runs without CATALOG_URL.
	Observed bool           `json:"observed"`
	Lookups  map[string]int `json:"lookups,omitempty"`
}

// breakerReading is one parse of /metrics.
type breakerReading struct {
	found       bool
	state       string
	source      string         // resilience_breaker_source's label at 1; "" if not exported
	transitions map[string]int // cumulative, by "from→to"

	limitFound bool
	limit      int // resilience_concurrency_limit
	inFlight   int // resilience_bulkhead_in_use: calls holding a slot of the limit

	cacheFound bool
	cache      map[string]int // catalog_cache_lookups_total, cumulative, by result
}

// parseBreaker reads the named breaker's state and transition counters, the named policy's
// concurrency limit and calls in flight, and the catalog cache's lookups, from a Prometheus
// text exposition.
func parseBreaker(r io.Reader, name string) (breakerReading, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return breakerReading{}, fmt.Errorf("parse metrics: %w", err)
	}
	reading := breakerReading{transitions: make(map[string]int), cache: make(map[string]int)}
	for _, m := range families["resilience_breaker_state"].GetMetric() {
		if label(m.GetLabel(), "name") != name {
			continue
		}
		v := int(value(m))
		if v < 0 || v >= len(breakerStates) {
			return breakerReading{}, fmt.Errorf("breaker %s: unknown state %d", name, v)
		}
		reading.found, reading.state = true, breakerStates[v]
	}
	for _, m := range families["resilience_breaker_source"].GetMetric() {
		if label(m.GetLabel(), "name") == name && value(m) == 1 {
			reading.source = label(m.GetLabel(), "source")
		}
	}
	for _, m := range families["resilience_breaker_transitions_total"].GetMetric() {
		labels := m.GetLabel()
		if label(labels, "name") == name {
			reading.transitions[label(labels, "from")+"→"+label(labels, "to")] = int(value(m))
		}
	}
	for _, m := range families["resilience_concurrency_limit"].GetMetric() {
		if label(m.GetLabel(), "name") == name {
			reading.limitFound, reading.limit = true, int(value(m))
		}
	}
	for _, m := range families["resilience_bulkhead_in_use"].GetMetric() {
		if label(m.GetLabel(), "name") == name {
			reading.inFlight = int(value(m))
		}
	}
	for _, m := range families["catalog_cache_lookups_total"].GetMetric() {
		reading.cacheFound = true
		reading.cache[label(m.GetLabel(), "result")] = int(value(m))
	}
	return reading, nil
}

// value reads a gauge or counter, also when the exposition left out its TYPE line.
func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return m.GetUntyped().GetValue()
}

func label(pairs []*dto.LabelPair, name string) string {
	for _, p := range pairs {
		if p.GetName() == name {
			return p.GetValue()
		}
	}
	return ""
}

// breakerWatch polls checkout's /metrics in the background.
type breakerWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	seen   breakerTracker // written by the polling goroutine until done is closed
}

// watchBreaker polls /metrics every cfg.MetricsInterval until stop, timing changes from start.
func watchBreaker(ctx context.Context, cfg Config, start time.Time) *breakerWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &breakerWatch{cancel: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: 10 * cfg.MetricsInterval}
	url := cfg.checkouts()[0] + "/metrics"
	policy := string(cfg.target())
	go func() {
		defer close(w.done)
		tick := time.NewTicker(cfg.MetricsInterval)
		defer tick.Stop()
		for {
			reading, err := readMetrics(ctx, client, url, policy)
			switch {
			case err == nil:
				w.seen.observe(reading, time.Since(start))
			case ctx.Err() == nil:
				w.seen.result.PollErrors++
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the polling and returns what it saw.
func (w *breakerWatch) stop() (Breaker, Limit, Cache) {
	w.cancel()
	<-w.done
	return w.seen.result, w.seen.limit, w.seen.cache
}

// breakerTracker folds successive readings into a Breaker, a Limit and a Cache.
type breakerTracker struct {
	result     Breaker
	first      map[string]int // the transition counters at the first reading
	limit      Limit
	cache      Cache
	firstCache map[string]int // the cache's lookup counters at the first reading
}

// observe records reading r, taken at offset at from the run's start.
func (t *breakerTracker) observe(r breakerReading, at time.Duration) {
	if r.limitFound {
		t.limit.Observed = true
		t.limit.Points = append(t.limit.Points, LimitPoint{At: Millis(at), Limit: r.limit, InFlight: r.inFlight})
	}
	if r.cacheFound {
		if !t.cache.Observed {
			t.cache.Observed, t.firstCache = true, r.cache
		}
		t.cache.Lookups = make(map[string]int)
		for k, v := range r.cache {
			if d := v - t.firstCache[k]; d > 0 {
				t.cache.Lookups[k] = d
			}
		}
	}
	b := &t.result
	if !r.found {
		return
	}
	if !b.Observed {
		b.Observed, b.Initial, b.InitialSource, t.first = true, r.state, r.source, r.transitions
		return
	}
	lastSource := b.InitialSource
	if n := len(b.Sources); n > 0 {
		lastSource = b.Sources[n-1].To
	}
	if r.source != lastSource {
		b.Sources = append(b.Sources, SourceChange{At: Millis(max(at, 0)), From: lastSource, To: r.source})
	}
	last := b.Initial
	if n := len(b.Transitions); n > 0 {
		last = b.Transitions[n-1].To
	}
	if r.state != last {
		b.Transitions = append(b.Transitions, Transition{At: Millis(max(at, 0)), From: last, To: r.state})
	}
	b.Counted = make(map[string]int)
	for k, v := range r.transitions {
		if d := v - t.first[k]; d > 0 {
			b.Counted[k] = d
		}
	}
}

func readMetrics(ctx context.Context, client *http.Client, url, policy string) (breakerReading, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return breakerReading{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return breakerReading{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return breakerReading{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseBreaker(resp.Body, policy)
}
