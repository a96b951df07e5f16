package api

import (
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the HTTP layer's Prometheus collectors.
type Metrics struct {
	orders   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checkout_orders_total",
			Help: "Orders placed, by the status POST /orders left them in (replays not counted).",
		}, []string{"status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "http_request_duration_seconds",
			Help: "HTTP request latency by route pattern and status code.",
			// From 1 ms (a fallback answer, a probe) to 10 s (a hung provider
			// without protection).
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "code"}),
	}
	for _, c := range []prometheus.Collector{m.orders, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// logAttrs collects attributes handlers add to their request's log line.
type logAttrs struct {
	mu    sync.Mutex
	attrs []slog.Attr
}

type logAttrsKey struct{}

// annotate adds attributes (order id, outcome) to the request's log line.
func annotate(ctx context.Context, attrs ...slog.Attr) {
	if la, ok := ctx.Value(logAttrsKey{}).(*logAttrs); ok {
		la.mu.Lock()
		la.attrs = append(la.attrs, attrs...)
		la.mu.Unlock()
	}
}

// observe logs one structured line per request and records its latency.
// It runs outside the pools, so rejected (503) requests are seen too.
func observe(log *slog.Logger, m *Metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			la := &logAttrs{}
			ctx := context.WithValue(r.Context(), logAttrsKey{}, la)
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r.WithContext(ctx))

			elapsed := time.Since(start)
			route := chi.RouteContext(ctx).RoutePattern()
			if route == "" {
				route = "unmatched"
			}
			m.duration.WithLabelValues(route, strconv.Itoa(ww.Status())).Observe(elapsed.Seconds())
			if route == "/health" || route == "/metrics" {
				return // probes and scrapes would drown the log
			}
			la.mu.Lock()
			attrs := append([]slog.Attr{
				slog.String("request_id", middleware.GetReqID(ctx)),
				slog.String("method", r.Method),
				slog.String("route", route),
				slog.Int("status", ww.Status()),
				slog.Duration("latency", elapsed),
			}, la.attrs...)
			la.mu.Unlock()
			log.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
		})
	}
}

// recoverPanic turns a handler panic into a logged error and a 500 problem,
// never a stack trace to the client. http.ErrAbortHandler is re-panicked:
// it is net/http's way to abort a response on purpose.
func recoverPanic(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				rec := recover()
				if rec == nil {
					return
				}
				if rec == http.ErrAbortHandler {
					panic(rec)
				}
				log.ErrorContext(r.Context(), "handler panicked", "panic", rec, "stack", string(debug.Stack()))
				writeProblem(w, newProblem(http.StatusInternalServerError, "", "An unexpected error occurred."))
			}()
			next.ServeHTTP(w, r)
		})
	}
}
