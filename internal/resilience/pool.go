package resilience

import (
	"fmt"
	"net/http"
)

// Pool bounds how many HTTP requests a group of routes serves at once, as
// the article's fixed worker pools do. A request that finds the pool full
// queues for at most MaxWait and then gets 503 with Retry-After, so the
// server sheds load instead of piling up goroutines and memory.
//
// Give business routes one pool and /health another: while a hung
// dependency holds every API slot, liveness probes still answer at once
// and the orchestrator doesn't restart a process that is merely degraded.
type Pool struct {
	b    *bulkhead
	full http.HandlerFunc
}

// NewPool builds the pool called name (the pool label of its metrics). full
// answers a request the pool sheds: the caller's 503, since how a service
// words its errors is not this package's business. A nil m keeps the
// metrics unregistered.
func NewPool(name string, cfg PoolConfig, m *Metrics, full http.HandlerFunc) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pool %q: %w", name, err)
	}
	if full == nil {
		return nil, fmt.Errorf("pool %q: no answer for shed requests", name)
	}
	if m == nil {
		m, _ = NewMetrics(nil) // cannot fail without a registry
	}
	return &Pool{full: full, b: newBulkhead(cfg.Size, cfg.MaxWait,
		m.poolInUse.WithLabelValues(name), m.poolRejected.WithLabelValues(name))}, nil
}

// Middleware serves each request from a pool slot.
func (p *Pool) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := p.b.acquire(r.Context()); err != nil {
			// Also when the client went away while queueing: nobody
			// reads the answer, but a handler should still write one.
			p.full(w, r)
			return
		}
		defer p.b.release()
		next.ServeHTTP(w, r)
	})
}
