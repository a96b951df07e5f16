package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/resilientcheckout/checkout/internal/order"
)

// Metrics are the charge worker's Prometheus collectors.
type Metrics struct {
	jobs   *prometheus.CounterVec
	failed *prometheus.CounterVec
}

// NewMetrics creates the worker's collectors on reg, including the backlog
// gauges computed from the database at scrape time.
func NewMetrics(reg prometheus.Registerer, db *pgxpool.Pool) (*Metrics, error) {
	m := &Metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_charge_jobs_total",
			Help: "charge_order job runs by outcome: paid, declined, rejected, already_settled, snoozed, retried, resolved (paid, found by the provider lookup), exhausted (failed: the lookup found no charge), unresolved (past giving up and the lookup failed: asked again later), interrupted (by shutdown).",
		}, []string{"outcome"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_orders_failed_total",
			Help: "Orders the worker moved to payment_failed, by reason; provider_unavailable means the worker gave up and the provider holds no charge.",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.jobs, m.failed, newBacklogCollector(db)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// backlogCollector reports the unsettled orders — the worker's backlog —
// straight from the database at scrape time, so every replica reports the
// same truth and nothing needs updating on each transition.
type backlogCollector struct {
	db       *pgxpool.Pool
	count    *prometheus.Desc
	oldest   *prometheus.Desc
	failures *prometheus.Desc
}

func newBacklogCollector(db *pgxpool.Pool) *backlogCollector {
	return &backlogCollector{
		db: db,
		count: prometheus.NewDesc("checkout_unsettled_orders",
			"Orders not yet paid or failed, by status (pending_payment is the worker's backlog).", []string{"status"}, nil),
		oldest: prometheus.NewDesc("checkout_unsettled_order_oldest_age_seconds",
			"Age of the oldest order in each unsettled status; 0 when there is none.", []string{"status"}, nil),
		failures: prometheus.NewDesc("checkout_backlog_query_failed",
			"1 when this scrape could not query the backlog (the database is unreachable), else 0.", nil, nil),
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.oldest
	ch <- c.failures
}

// backlogTimeout keeps a scrape on a dead database well inside Prometheus's
// default 10 s scrape timeout (and the demo's 2 s one).
const backlogTimeout = time.Second

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), backlogTimeout)
	defer cancel()
	backlog, err := order.Backlog(ctx, c.db)
	failed := 0.0
	if err != nil {
		failed = 1
	}
	for _, e := range backlog {
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(e.Count), string(e.Status))
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, e.Oldest.Seconds(), string(e.Status))
	}
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, failed)
}
