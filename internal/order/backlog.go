package order

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

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

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	// A scrape must not hang on a dead database.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, err := c.db.Query(ctx, `
		SELECT s.status, count(o.id), coalesce(extract(epoch FROM now() - min(o.created_at)), 0)
		FROM unnest(ARRAY['pending', 'pending_payment']) AS s(status)
		LEFT JOIN orders o ON o.status = s.status
		GROUP BY s.status`)
	failed := 0.0
	if err == nil {
		defer rows.Close()
		for rows.Next() {
			var (
				status string
				n      int64
				age    float64
			)
			if err = rows.Scan(&status, &n, &age); err != nil {
				break
			}
			ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(n), status)
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, status)
		}
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, failed)
}
