package resilience

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the collectors every Policy and Pool of a process reports
// to. Build it once per registry and share it: the vectors carry the
// dependency or pool name as a label, so any number of policies coexist on
// one registry.
type Metrics struct {
	breakerState       *prometheus.GaugeVec
	breakerTransitions *prometheus.CounterVec
	calls              *prometheus.CounterVec
	bulkheadInUse      *prometheus.GaugeVec
	bulkheadRejected   *prometheus.CounterVec
	retryAttempts      *prometheus.CounterVec
	retryBackoff       *prometheus.HistogramVec
	poolInUse          *prometheus.GaugeVec
	poolRejected       *prometheus.CounterVec
}

// Call outcomes, the values of resilience_calls_total's outcome label.
const (
	outcomeSuccess  = "success"  // the call returned without error
	outcomeFailure  = "failure"  // a transient error or an attempt timeout
	outcomeSlow     = "slow"     // ran past the slow threshold (counted then, once)
	outcomeRejected = "rejected" // refused by the breaker or the bulkhead: never made
	outcomeExcluded = "excluded" // a final answer (a decline) or the caller gave up
)

// NewMetrics creates the collectors and registers them on reg. A nil reg
// leaves them unregistered, which suits tests and examples.
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
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "resilience_calls_total",
			Help: "Attempts by outcome: success, failure, slow (counted at the threshold), rejected (breaker or bulkhead), excluded (final answers, caller gave up).",
		}, []string{"name", "outcome"}),
		bulkheadInUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "resilience_bulkhead_in_use",
			Help: "Bulkhead slots held by calls in flight.",
		}, []string{"name"}),
		bulkheadRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "resilience_bulkhead_rejected_total",
			Help: "Calls rejected because the bulkhead stayed full for its whole wait.",
		}, []string{"name"}),
		retryAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "resilience_retry_attempts_total",
			Help: "Retries, that is attempts after the first.",
		}, []string{"name"}),
		retryBackoff: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "resilience_retry_backoff_seconds",
			Help:    "Backoff slept before each retry.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"name"}),
		poolInUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "http_pool_in_use",
			Help: "HTTP requests being served by the pool.",
		}, []string{"pool"}),
		poolRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_pool_rejected_total",
			Help: "HTTP requests answered 503 because the pool stayed full for the whole wait.",
		}, []string{"pool"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{
		m.breakerState, m.breakerTransitions, m.calls, m.bulkheadInUse, m.bulkheadRejected,
		m.retryAttempts, m.retryBackoff, m.poolInUse, m.poolRejected,
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
}

func (m *Metrics) callCounters(name string) callCounters {
	return callCounters{
		success:  m.calls.WithLabelValues(name, outcomeSuccess),
		failure:  m.calls.WithLabelValues(name, outcomeFailure),
		slow:     m.calls.WithLabelValues(name, outcomeSlow),
		rejected: m.calls.WithLabelValues(name, outcomeRejected),
		excluded: m.calls.WithLabelValues(name, outcomeExcluded),
	}
}
