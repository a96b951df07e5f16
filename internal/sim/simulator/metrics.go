package simulator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome labels how a request to a simulator ended, in metrics. The
// outcomes below are common to both simulators; each adds its own.
type Outcome string

const (
	OutcomeInvalid   Outcome = "invalid"
	OutcomeError     Outcome = "error"
	OutcomeDown      Outcome = "down"
	OutcomeAbandoned Outcome = "abandoned"
)

// RequestMetrics are the metrics of a simulator's main request: how many
// ended with each outcome, how many are in flight, and how long they took.
type RequestMetrics struct {
	Requests *prometheus.CounterVec
	InFlight prometheus.Gauge
	Duration prometheus.Histogram
}

// NewRequestMetrics registers the request metrics the options describe on
// reg; the requests counter is labelled by outcome.
func NewRequestMetrics(reg prometheus.Registerer, requests prometheus.CounterOpts, inFlight prometheus.GaugeOpts, duration prometheus.HistogramOpts) *RequestMetrics {
	m := &RequestMetrics{
		Requests: prometheus.NewCounterVec(requests, []string{"outcome"}),
		InFlight: prometheus.NewGauge(inFlight),
		Duration: prometheus.NewHistogram(duration),
	}
	reg.MustRegister(m.Requests, m.InFlight, m.Duration)
	return m
}

// Observe counts one request that ended with o after d.
func (m *RequestMetrics) Observe(o Outcome, d time.Duration) {
	m.Requests.WithLabelValues(string(o)).Inc()
	m.Duration.Observe(d.Seconds())
}
