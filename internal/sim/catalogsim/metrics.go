package catalogsim

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// outcomeOK is a price request answered 200; the other outcomes are
// simulator's.
const outcomeOK simulator.Outcome = "ok"

type metrics struct {
	*simulator.RequestMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{simulator.NewRequestMetrics(reg,
		prometheus.CounterOpts{Name: "catalogsim_price_requests_total", Help: "Price requests by outcome."},
		prometheus.GaugeOpts{Name: "catalogsim_price_requests_in_flight", Help: "Price requests being answered."},
		prometheus.HistogramOpts{
			Name: "catalogsim_price_duration_seconds",
			Help: "Time spent on a price request, whatever its outcome.",
			// From 1 ms to ~16 s: the 20 ms normal latency and injected delays of seconds.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		})}
}

// Stats is the body of GET /admin/stats.
type Stats struct {
	// Requests counts price requests received, whatever their outcome.
	Requests int `json:"requests"`
	// SKUsRequested counts the distinct SKUs of the requests answered or
	// delayed (not those refused by a fault first).
	SKUsRequested int `json:"skus_requested"`
	InFlight      int `json:"in_flight"`
	MaxInFlight   int `json:"max_in_flight"`
}

// stats counts requests, and the most in flight at once: the figure that
// shows whether checkout's coalescing and bulkhead protect the catalog.
type stats struct {
	mu      sync.Mutex
	s       Stats
	metrics *metrics
}

func newStats(m *metrics) *stats { return &stats{metrics: m} }

// add counts one request in and returns the func that counts it out.
func (st *stats) add() (done func()) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.s.Requests++
	st.s.InFlight++
	st.s.MaxInFlight = max(st.s.MaxInFlight, st.s.InFlight)
	st.metrics.InFlight.Set(float64(st.s.InFlight))
	return func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.s.InFlight--
		st.metrics.InFlight.Set(float64(st.s.InFlight))
	}
}

func (st *stats) requested(n int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.s.SKUsRequested += n
}

func (st *stats) snapshot() Stats {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s
}

// reset zeroes the counts but keeps the requests in flight, which are part
// of the next experiment's load; the maximum restarts from them.
func (st *stats) reset() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.s = Stats{InFlight: st.s.InFlight, MaxInFlight: st.s.InFlight}
}
