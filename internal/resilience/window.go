package resilience

// outcome is what the breaker learned from one completed call.
type outcome uint8

const (
	succeeded outcome = iota
	failed
	slow
)

// window holds the outcomes of the last len(ring) calls, the article's
// count window: gobreaker rolls its counts by time only, and a count window
// reacts as fast at 2 req/s as at 200. It has no lock (breaker.win).
type window struct {
	ring     []outcome
	next     int // where the next outcome goes, overwriting the oldest
	calls    int // outcomes held, ≤ len(ring)
	failures int // failed outcomes held
	slow     int // slow outcomes held
}

func newWindow(size int) window { return window{ring: make([]outcome, size)} }

func (w *window) add(o outcome) {
	if w.calls == len(w.ring) {
		w.count(w.ring[w.next], -1)
	} else {
		w.calls++
	}
	w.ring[w.next] = o
	w.count(o, +1)
	w.next++
	if w.next == len(w.ring) {
		w.next = 0
	}
}

func (w *window) count(o outcome, delta int) {
	switch o {
	case failed:
		w.failures += delta
	case slow:
		w.slow += delta
	}
}

func (w *window) reset() { w.next, w.calls, w.failures, w.slow = 0, 0, 0, 0 }

// tripped reports whether the window holds enough calls to judge and either
// rate, slow calls counting as failures too, reaches its threshold (B1).
// Dividing, not multiplying the rate, keeps 5/10 ≥ 0.5 exact.
func (w *window) tripped(minCalls int, failureRate, slowRate float64) bool {
	if w.calls == 0 || w.calls < minCalls {
		return false
	}
	n := float64(w.calls)
	return float64(w.failures+w.slow)/n >= failureRate || float64(w.slow)/n >= slowRate
}
