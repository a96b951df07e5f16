package resilience

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// tailSamples successful calls judge the calls in flight: 13 s of them at 40
// calls/s (with 256, a healthy long tail's percentile wandered low enough to
// call one call in a thousand late). Below minTailSamples a call is late only
// at the slow threshold: the 99th percentile of fewer calls is their slowest,
// for a long tail well below the true one (of 20 with σ 0.5, about the 95th).
const (
	tailSamples    = 512
	minTailSamples = 100
)

// tail keeps the last tailSamples successful calls' latencies, in order
// (ring) and sorted, and their 99th percentile (limiter.lateAfter).
type tail struct {
	mu     sync.Mutex
	ring   [tailSamples]time.Duration
	next   int
	sorted []time.Duration
	p99    atomic.Int64 // 0 until minTailSamples calls have succeeded
}

// add records one successful call's latency, dropping the oldest.
func (t *tail) add(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sorted == nil {
		t.sorted = make([]time.Duration, 0, tailSamples)
	}
	if len(t.sorted) == tailSamples {
		i, _ := slices.BinarySearch(t.sorted, t.ring[t.next])
		t.sorted = slices.Delete(t.sorted, i, i+1)
	}
	t.ring[t.next] = d
	t.next = (t.next + 1) % tailSamples
	i, _ := slices.BinarySearch(t.sorted, d)
	t.sorted = slices.Insert(t.sorted, i, d)
	if n := len(t.sorted); n >= minTailSamples {
		t.p99.Store(int64(t.sorted[(99*n+99)/100-1])) // nearest rank: ⌈0.99 n⌉
	}
}

// percentile99 returns the 99th percentile, 0 before minTailSamples calls.
func (t *tail) percentile99() time.Duration { return time.Duration(t.p99.Load()) }
