package resilience

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the collectors every Policy of a process reports to, with
// the dependency's name as a label: build it once per registry and share it.
type Metrics struct {
	breakerState       *prometheus.GaugeVec
	breakerTransitions *prometheus.CounterVec
	breakerSource      *prometheus.GaugeVec
	breakerImposed     *prometheus.CounterVec
	breakerEffective   *effectiveStates
	calls              *prometheus.CounterVec
	limit              *prometheus.GaugeVec
	bulkheadInUse      *prometheus.GaugeVec
	rejected           *prometheus.CounterVec
	retryAttempts      *prometheus.CounterVec
	retryBackoff       *prometheus.HistogramVec
}

// Call outcomes, the values of resilience_calls_total's outcome label.
const (
	outcomeSuccess  = "success"  // the call returned without error
	outcomeFailure  = "failure"  // a transient error or an attempt timeout
	outcomeSlow     = "slow"     // ran past the slow threshold (counted then, once)
	outcomeRejected = "rejected" // refused by the breaker or the bulkhead: never made
	outcomeExcluded = "excluded" // a final answer (a decline) or the caller gave up
)

// Who refused a call, the values of resilience_rejected_total's reason label.
const (
	reasonOpen     = "breaker_open"      // ErrOpen
	reasonHalfOpen = "breaker_half_open" // ErrTooManyRequests
	reasonLimit    = "limit"             // ErrBulkheadFull
)

// NewMetrics creates the collectors and registers them on reg, if not nil.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "resilience_breaker_state",
			Help: "Circuit breaker state: 0 closed, 1 half-open, 2 open. Open becomes half-open on the next call after the open duration.",
		}, []string{"name"}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "resilience_breaker_transitions_total",
			Help: "Circuit breaker state changes.",
		}, []string{"name", "from", "to"}),
		breakerSource: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "resilience_breaker_source",
			Help: "Who decides whether the breaker lets calls through, one series per source set to 1: local (the process's own breaker), fleet (another process's breaker, shared through the fleet coordinator), forced (an operator). As of the last change: an imposed state that ran out of time without a release still shows.",
		}, []string{"name", "source"}),
		breakerEffective: &effectiveStates{desc: prometheus.NewDesc("resilience_breaker_effective_state",
			"The breaker state calls meet, read at each scrape: 0 closed, 1 half-open, 2 open. It is resilience_breaker_state (the process's own breaker) unless a state imposed by the fleet or forced by an operator holds (resilience_breaker_source says which): then that state, open while every call is refused, half-open while only the fleet's probes may pass.",
			[]string{"name"}, nil)},
		breakerImposed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "resilience_breaker_imposed_total",
			Help: "Breaker states imposed from outside the process, by source (fleet, forced) and state: open, half-open (another process probes), probing (this process probes for the fleet), released.",
		}, []string{"name", "source", "state"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "resilience_calls_total",
			Help: "Attempts by outcome: success, failure, slow (counted at the threshold), rejected (breaker or bulkhead), excluded (final answers, caller gave up).",
		}, []string{"name", "outcome"}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "resilience_concurrency_limit",
			Help: "Calls the concurrency limit lets run at once: the limit's current value.",
		}, []string{"name"}),
		bulkheadInUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "resilience_bulkhead_in_use",
			Help: "Calls in flight, each holding a slot of the concurrency limit.",
		}, []string{"name"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "resilience_rejected_total",
			Help: "Calls refused without being made, by reason: breaker_open, breaker_half_open (probes in flight), limit (the concurrency limit stayed reached for its whole wait).",
		}, []string{"name", "reason"}),
		retryAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "resilience_retry_attempts_total",
			Help: "Retries, that is attempts after the first.",
		}, []string{"name"}),
		retryBackoff: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "resilience_retry_backoff_seconds",
			Help:    "Backoff slept before each retry.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"name"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{
		m.breakerState, m.breakerTransitions, m.breakerSource, m.breakerImposed, m.breakerEffective, m.calls, m.limit, m.bulkheadInUse,
		m.rejected, m.retryAttempts, m.retryBackoff,
	} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// callCounters are one policy's children of resilience_calls_total, looked
// up once so the hot path pays an atomic add, not a label hash.
type callCounters struct {
	success, failure, slow, rejected, excluded prometheus.Counter
	rejectedOpen, rejectedHalfOpen             prometheus.Counter // by reason; the limiter counts its own
}

func (m *Metrics) callCounters(name string) callCounters {
	return callCounters{
		success:          m.calls.WithLabelValues(name, outcomeSuccess),
		failure:          m.calls.WithLabelValues(name, outcomeFailure),
		slow:             m.calls.WithLabelValues(name, outcomeSlow),
		rejected:         m.calls.WithLabelValues(name, outcomeRejected),
		excluded:         m.calls.WithLabelValues(name, outcomeExcluded),
		rejectedOpen:     m.rejected.WithLabelValues(name, reasonOpen),
		rejectedHalfOpen: m.rejected.WithLabelValues(name, reasonHalfOpen),
	}
}

// limiterMetrics looks up one policy's children of the limit's collectors.
func (m *Metrics) limiterMetrics(name string) limiterMetrics {
	return limiterMetrics{
		limit:    m.limit.WithLabelValues(name),
		inUse:    m.bulkheadInUse.WithLabelValues(name),
		rejected: m.rejected.WithLabelValues(name, reasonLimit),
	}
}

// effectiveStates exports resilience_breaker_effective_state, read at each
// scrape: an imposed state ends by running out of time, which nothing reports.
// A later breaker of a name replaces an earlier one, as the gauges' children do.
type effectiveStates struct {
	desc     *prometheus.Desc
	breakers sync.Map // name → *breaker
}

func (e *effectiveStates) add(b *breaker) { e.breakers.Store(b.name, b) }

func (e *effectiveStates) Describe(ch chan<- *prometheus.Desc) { ch <- e.desc }

func (e *effectiveStates) Collect(ch chan<- prometheus.Metric) {
	for name, b := range e.breakers.Range {
		state := b.(*breaker).effectiveState()
		ch <- prometheus.MustNewConstMetric(e.desc, prometheus.GaugeValue, float64(state), name.(string))
	}
}
