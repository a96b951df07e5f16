package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrBulkheadFull means every slot stayed taken for the whole bounded wait,
// so the call was not made. A Policy's concurrency limit, static or
// adaptive, returns it too.
var ErrBulkheadFull = errors.New("resilience: bulkhead full")

// bulkhead bounds concurrency with a buffered channel used as a semaphore
// (the HTTP pools; a Policy's limit is a limiter, whose size can move):
// a send takes a slot, a receive frees one. Unlike x/sync/semaphore it
// needs no lock and no waiter list, and a non-blocking send makes the fast
// path allocation-free. Waiters are not served in FIFO order, which is
// fine for a wait measured in milliseconds.
type bulkhead struct {
	slots    chan struct{}
	wait     time.Duration
	inUse    prometheus.Gauge
	rejected prometheus.Counter
}

func newBulkhead(size int, wait time.Duration, inUse prometheus.Gauge, rejected prometheus.Counter) *bulkhead {
	return &bulkhead{slots: make(chan struct{}, size), wait: wait, inUse: inUse, rejected: rejected}
}

// acquire takes a slot, waiting at most b.wait and never past ctx. It
// returns ErrBulkheadFull when the wait runs out, or ctx's error when the
// caller gives up first; neither counts against the dependency.
func (b *bulkhead) acquire(ctx context.Context) error {
	select {
	case b.slots <- struct{}{}:
		b.inUse.Inc()
		return nil
	default:
	}
	if b.wait > 0 {
		t := time.NewTimer(b.wait)
		defer t.Stop()
		select {
		case b.slots <- struct{}{}:
			b.inUse.Inc()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	b.rejected.Inc()
	return ErrBulkheadFull
}

func (b *bulkhead) release() {
	b.inUse.Dec()
	<-b.slots
}
