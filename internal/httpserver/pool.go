package httpserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Pool bounds how many HTTP requests a group of routes serves at once, as
// the article's fixed worker pools do. A request that finds the pool full
// queues for at most MaxWait and then gets the caller's 503, so the server
// sheds load instead of piling up goroutines and memory.
//
// Give business routes one pool and /health another: while a hung
// dependency holds every API slot, liveness probes still answer at once
// and the orchestrator doesn't restart a process that is merely degraded.
//
// The slots are a buffered channel used as a semaphore: a send takes one,
// a receive frees one, and a non-blocking send keeps the fast path free of
// locks and allocations. Waiters are not served in FIFO order, which is
// fine for a wait measured in milliseconds.
type Pool struct {
	slots    chan struct{}
	wait     time.Duration
	full     http.HandlerFunc
	inUse    prometheus.Gauge
	rejected prometheus.Counter
}

// PoolConfig sizes a Pool.
type PoolConfig struct {
	// Size bounds the requests the pool serves at once.
	Size int
	// MaxWait is how long a request may queue for a slot before it is shed.
	MaxWait time.Duration
}

// DefaultAPIPool is the pool business routes share: 16 slots, the
// article's worker pool, and the 1 s queue wait of docs/design.md, "Defaults".
func DefaultAPIPool() PoolConfig { return PoolConfig{Size: 16, MaxWait: time.Second} }

// DefaultHealthPool is the separate pool for /health: 4 slots, as in the
// article. Its handler touches no dependency and answers in microseconds,
// so a short wait only matters under a flood of probes.
func DefaultHealthPool() PoolConfig { return PoolConfig{Size: 4, MaxWait: 100 * time.Millisecond} }

// Validate reports a size below 1 or a negative wait.
func (c PoolConfig) Validate() error {
	var errs []error
	if c.Size < 1 {
		errs = append(errs, fmt.Errorf("pool Size %d must be at least 1", c.Size))
	}
	if c.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("pool MaxWait %v must not be negative", c.MaxWait))
	}
	return errors.Join(errs...)
}

// PoolMetrics are the pools' collectors, one series per pool name.
type PoolMetrics struct {
	inUse    *prometheus.GaugeVec
	rejected *prometheus.CounterVec
}

// NewPoolMetrics registers the pools' metrics with reg; a nil reg keeps
// them unregistered.
func NewPoolMetrics(reg prometheus.Registerer) (*PoolMetrics, error) {
	m := &PoolMetrics{
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "http_pool_in_use",
			Help: "HTTP requests being served by the pool.",
		}, []string{"pool"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_pool_rejected_total",
			Help: "HTTP requests answered 503 because the pool stayed full for the whole wait.",
		}, []string{"pool"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := errors.Join(reg.Register(m.inUse), reg.Register(m.rejected)); err != nil {
		return nil, err
	}
	return m, nil
}

// NewPool builds the pool called name (the pool label of its metrics). full
// answers a request the pool sheds: the caller's 503, since how a service
// words its errors is not this package's business. A nil m keeps the
// metrics unregistered.
func NewPool(name string, cfg PoolConfig, m *PoolMetrics, full http.HandlerFunc) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pool %q: %w", name, err)
	}
	if full == nil {
		return nil, fmt.Errorf("pool %q: no answer for shed requests", name)
	}
	if m == nil {
		m, _ = NewPoolMetrics(nil) // cannot fail without a registry
	}
	return &Pool{slots: make(chan struct{}, cfg.Size), wait: cfg.MaxWait, full: full,
		inUse: m.inUse.WithLabelValues(name), rejected: m.rejected.WithLabelValues(name)}, nil
}

// Middleware serves each request from a pool slot.
func (p *Pool) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.acquire(r.Context()) {
			// Also when the client went away while queueing: nobody
			// reads the answer, but a handler should still write one.
			p.full(w, r)
			return
		}
		defer p.release()
		next.ServeHTTP(w, r)
	})
}

// acquire takes a slot, waiting at most p.wait and never past ctx, and
// reports whether it got one. A request shed after the wait is counted
// rejected; one whose client left is not.
func (p *Pool) acquire(ctx context.Context) bool {
	select {
	case p.slots <- struct{}{}:
		p.inUse.Inc()
		return true
	default:
	}
	if p.wait > 0 {
		t := time.NewTimer(p.wait)
		defer t.Stop()
		select {
		case p.slots <- struct{}{}:
			p.inUse.Inc()
			return true
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	p.rejected.Inc()
	return false
}

func (p *Pool) release() {
	p.inUse.Dec()
	<-p.slots
}
