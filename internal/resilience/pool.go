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
	b *bulkhead
}

// NewPool builds the pool called name (the pool label of its metrics). A
// nil m keeps the metrics unregistered.
func NewPool(name string, cfg PoolConfig, m *Metrics) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pool %q: %w", name, err)
	}
	if m == nil {
		m, _ = NewMetrics(nil) // cannot fail without a registry
	}
	return &Pool{b: newBulkhead(cfg.Size, cfg.MaxWait,
		m.poolInUse.WithLabelValues(name), m.poolRejected.WithLabelValues(name))}, nil
}

// unavailable is the RFC 9457 body of the 503 a full pool answers with.
// It is fixed, so writing it costs nothing while the server is saturated.
const unavailable = `{"type":"about:blank","title":"Service Unavailable","status":503,` +
	`"detail":"The server is at capacity. Retry after the time in the Retry-After header."}`

// Middleware serves each request from a pool slot.
func (p *Pool) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := p.b.acquire(r.Context()); err != nil {
			// Also when the client went away while queueing: nobody
			// reads the answer, but a handler should still write one.
			h := w.Header()
			h.Set("Content-Type", "application/problem+json")
			h.Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(unavailable))
			return
		}
		defer p.b.release()
		next.ServeHTTP(w, r)
	})
}
