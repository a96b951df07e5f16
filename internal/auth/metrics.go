package auth

import "github.com/prometheus/client_golang/prometheus"

// Metrics are authentication's collectors. The identity policy's breaker
// and retry metrics are resilience's, labelled name="identity".
type Metrics struct {
	tokens                      *prometheus.CounterVec
	valid, invalid, unavailable prometheus.Counter
	calls                       *prometheus.HistogramVec
	refreshes                   *prometheus.CounterVec
	keys                        prometheus.Gauge
}

// NewMetrics creates the collectors and registers them on reg. A nil reg
// leaves them unregistered, which suits tests.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auth_tokens_total",
			Help: "Bearer tokens checked, by result: valid, invalid (401), unavailable (key unknown while the issuer cannot be asked: 503).",
		}, []string{"result"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "identity_call_duration_seconds",
			Help: "Calls to the identity issuer (discovery document, JWKS) by outcome, retries included.",
			// From a local issuer's 1 ms to the policy's two 2 s attempts.
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2, 5},
		}, []string{"outcome"}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "identity_key_refreshes_total",
			Help: "Fetches of the issuer's signing keys by reason (schedule, unknown_kid) and result (success, failure).",
		}, []string{"reason", "result"}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "identity_keys",
			Help: "Signing keys in the cache, as last fetched.",
		}),
	}
	m.valid, m.invalid, m.unavailable = m.tokens.WithLabelValues("valid"), m.tokens.WithLabelValues("invalid"), m.tokens.WithLabelValues("unavailable")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.tokens, m.calls, m.refreshes, m.keys} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
