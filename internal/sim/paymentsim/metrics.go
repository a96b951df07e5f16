package paymentsim

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// outcome labels how a create or a read of PaymentIntents ended, in metrics. Besides the outcomes common
// to both simulators (simulator.OutcomeInvalid and the others), the provider has these.
type outcome = simulator.Outcome

const (
	outcomeSucceeded      outcome = "succeeded"
	outcomeDeclined       outcome = "declined"
	outcomeRequiresAction outcome = "requires_action" // a PaymentIntent left for the customer to authenticate
	// outcomeRequiresConfirmation: a PaymentIntent created unconfirmed, which moved no money.
	outcomeRequiresConfirmation outcome = "requires_confirmation"
	outcomeReplayed             outcome = "replayed"
	outcomeConflict             outcome = "conflict"
	outcomeMismatch             outcome = "mismatch"
	outcomeRefused              outcome = "refused"
	outcomeResetAfterCharge     outcome = "reset_after_charge"
	outcomeRateLimited          outcome = "rate_limited" // answered 429 by the rate limit
	outcomeFound                outcome = "found"        // a read answered 200, whatever it found
)

// metrics are the charge request (create) metrics every simulator has, and the reads and
// the highest in-flight count that only the provider has.
type metrics struct {
	*simulator.RequestMetrics
	reads       *prometheus.CounterVec
	maxInFlight prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		RequestMetrics: simulator.NewRequestMetrics(reg,
			prometheus.CounterOpts{Name: "paymentsim_charge_requests_total", Help: "Charge requests by outcome."},
			prometheus.GaugeOpts{
				Name: "paymentsim_charge_requests_in_flight",
				Help: "Charge requests being processed, including those whose client has gone.",
			},
			prometheus.HistogramOpts{
				Name: "paymentsim_charge_duration_seconds",
				Help: "Time spent on a charge request, whatever its outcome.",
				// From 5 ms to ~20 s: covers the 200 ms normal latency and the experiment's 10 s slow phase.
				Buckets: prometheus.ExponentialBuckets(0.005, 2, 13),
			}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paymentsim_lookup_requests_total",
			Help: "Reads of PaymentIntents (retrieve, list, search), by outcome.",
		}, []string{"outcome"}),
		maxInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "paymentsim_charge_requests_in_flight_max",
			Help: "Most charge requests processed at once since start or the last reset.",
		}),
	}
	reg.MustRegister(m.reads, m.maxInFlight)
	return m
}

func (m *metrics) observeRead(o outcome) {
	m.reads.WithLabelValues(string(o)).Inc()
}

// inflight counts charge requests being processed and remembers the highest count, the
// figure that shows whether checkout's bulkhead protected the provider — overall, and while
// a fault was active: what a struggling provider had piled on it, without the recovery
// traffic that follows (a hung request stays counted until it ends, long after its fault).
type inflight struct {
	mu       sync.Mutex
	n, max   int
	faultMax int
	// duringFault counts the charge requests that arrived while a fault was
	// active; started those that began processing, and over those that
	// began it above the provider's capacity (see scaledLatency).
	// readsDuringFault counts the reads that arrived while one was:
	// questions sent into the trouble, which charge nothing.
	duringFault, started, over int
	readsDuringFault           int
	idleCh                     chan struct{} // closed while n == 0
	metrics                    *metrics
}

func newInflight(m *metrics) *inflight {
	idle := make(chan struct{})
	close(idle)
	return &inflight{idleCh: idle, metrics: m}
}

// add counts one request in and returns the func that counts it out. duringFault says a
// fault is active as it arrives; the count only grows on arrivals, so the highest count
// seen on arrivals during faults is the highest while they were active.
func (f *inflight) add(duringFault bool) (done func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idleCh = make(chan struct{})
	}
	f.n++
	f.max = max(f.max, f.n)
	if duringFault {
		f.faultMax = max(f.faultMax, f.n)
		f.duringFault++
	}
	f.publish()
	return f.remove
}

func (f *inflight) remove() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.idleCh)
	}
	f.publish()
}

func (f *inflight) publish() {
	f.metrics.InFlight.Set(float64(f.n))
	f.metrics.maxInFlight.Set(float64(f.max))
}

func (f *inflight) idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idleCh
}

func (f *inflight) counts() (n, highest, highestDuringFault int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.max, f.faultMax
}

// processing counts a charge that begins processing, above capacity or not.
func (f *inflight) processing(overCapacity bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started++
	if overCapacity {
		f.over++
	}
}

// arrivals returns the counts kept beside the in-flight ones.
func (f *inflight) arrivals() (duringFault, started, overCapacity, readsDuringFault int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.duringFault, f.started, f.over, f.readsDuringFault
}

// readDuringFault counts a read that arrived while a fault was active.
func (f *inflight) readDuringFault() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readsDuringFault++
}

// resetMax restarts the maximum from the current count, not zero: requests still in flight
// are part of the next experiment's load. No fault has been seen since.
func (f *inflight) resetMax() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.max, f.faultMax = f.n, 0
	f.duringFault, f.started, f.over, f.readsDuringFault = 0, 0, 0, 0
	f.publish()
}
