package catalog

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of one SKU's lookup, the values of catalog_cache_lookups_total's
// result label. Every SKU a lookup asks for counts once, under one of them.
const (
	resultHit         = "hit"         // a fresh entry, no catalog request
	resultMiss        = "miss"        // answered by the catalog
	resultStale       = "stale"       // catalog unavailable: a stale entry served
	resultUnavailable = "unavailable" // catalog unavailable: no entry young enough
)

// Outcomes of one catalog call, the values of catalog_call_duration_seconds'
// outcome label: those resilience_calls_total{name="catalog"} counts the same
// calls under, so the two read side by side.
const (
	outcomeSuccess  = "success"  // the catalog answered
	outcomeFailure  = "failure"  // a transient error or the attempt's timeout
	outcomeExcluded = "excluded" // a final answer (the catalog rejected the request) or the lookup gave up
)

// Metrics holds the cache's collectors. The policy's breaker, bulkhead and
// retry metrics are resilience's, labelled name="catalog". Build one
// Metrics per Service.
type Metrics struct {
	lookups                       *prometheus.CounterVec
	hit, miss, stale, unavailable prometheus.Counter
	requests, coalesced           prometheus.Counter
	staleAge                      prometheus.Histogram
	entries                       prometheus.Gauge
	// callDuration's children by outcome, looked up once.
	callDuration                           *prometheus.HistogramVec
	callSuccess, callFailure, callExcluded prometheus.Observer
}

// NewMetrics creates the collectors and registers them on reg. A nil reg
// leaves them unregistered, which suits tests.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "catalog_cache_lookups_total",
			Help: "SKU price lookups by result: hit (fresh cache entry), miss (answered by the catalog), stale (catalog unavailable, a stale entry served), unavailable (catalog unavailable, no entry young enough).",
		}, []string{"result"}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "catalog_requests_total",
			Help: "Catalog lookups started for cache misses (each may make several attempts, see resilience_calls_total{name=\"catalog\"}).",
		}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "catalog_requests_coalesced_total",
			Help: "Lookups that shared a catalog request already in flight for the same SKUs instead of starting their own.",
		}),
		staleAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "catalog_cache_stale_age_seconds",
			Help: "Age of each stale entry served while the catalog was unavailable.",
			// From the 30 s TTL to the 10 min staleness bound.
			Buckets: []float64{30, 60, 120, 180, 300, 450, 600},
		}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "catalog_cache_entries",
			Help: "SKUs held by the price cache.",
		}),
		callDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "catalog_call_duration_seconds",
			Help: "Latency of each catalog call (one attempt, as resilience_calls_total{name=\"catalog\"} counts them) as checkout sees it, network included, by outcome: success, failure (transient error or the attempt's timeout), excluded (the catalog rejected the request, or the lookup gave up). Calls the breaker or the limit refused were never made and are not here.",
			// The buckets of catalogsim_price_duration_seconds, so the
			// client's and the server's view of a call compare bucket by
			// bucket: 1 ms to ~16 s.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"outcome"}),
	}
	m.callSuccess = m.callDuration.WithLabelValues(outcomeSuccess)
	m.callFailure = m.callDuration.WithLabelValues(outcomeFailure)
	m.callExcluded = m.callDuration.WithLabelValues(outcomeExcluded)
	m.hit = m.lookups.WithLabelValues(resultHit)
	m.miss = m.lookups.WithLabelValues(resultMiss)
	m.stale = m.lookups.WithLabelValues(resultStale)
	m.unavailable = m.lookups.WithLabelValues(resultUnavailable)
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.lookups, m.requests, m.coalesced, m.staleAge, m.entries, m.callDuration} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// observeCall records one catalog call that took d and returned err; ctx is
// the lookup's, whose end makes the call's outcome the lookup's doing rather
// than the catalog's, as the policy counts it.
func (m *Metrics) observeCall(ctx context.Context, d time.Duration, err error) {
	switch {
	case err == nil:
		m.callSuccess.Observe(d.Seconds())
	case errors.Is(err, errRejected) || ctx.Err() != nil:
		m.callExcluded.Observe(d.Seconds())
	default:
		m.callFailure.Observe(d.Seconds())
	}
}
