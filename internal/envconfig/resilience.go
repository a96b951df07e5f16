package envconfig

import (
	"time"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// Resilience reads the payment protection stack's settings over the
// defaults d. checkout and the worker read the same names, each for its own
// policy; each binary picks its defaults (docs/design.md, "Defaults", via
// resilience.DefaultConfig, with the worker's adjustments). The result
// starts as d, so a field no variable sets — Mode, which each binary
// decides itself, and the worker's Background role — keeps d's value.
func (r *Reader) Resilience(d resilience.Config) resilience.Config {
	c := d
	c.AttemptTimeout = r.Duration("PAYMENT_ATTEMPT_TIMEOUT", d.AttemptTimeout, time.Millisecond, time.Minute)
	c.MaxAttempts = r.Int("PAYMENT_MAX_ATTEMPTS", d.MaxAttempts, 1, 10)
	c.BackoffBase = r.Duration("PAYMENT_BACKOFF_BASE", d.BackoffBase, 0, time.Minute)
	c.BackoffMax = r.Duration("PAYMENT_BACKOFF_MAX", d.BackoffMax, 0, time.Minute)
	c.WindowSize = r.Int("BREAKER_WINDOW", d.WindowSize, 1, 1000)
	c.MinCalls = r.Int("BREAKER_MIN_CALLS", d.MinCalls, 1, 1000)
	c.FailureRate = r.Float("BREAKER_FAILURE_RATE", d.FailureRate, 0.01, 1)
	c.SlowCallThreshold = r.Duration("BREAKER_SLOW_CALL_THRESHOLD", d.SlowCallThreshold, time.Millisecond, time.Minute)
	c.SlowCallRate = r.Float("BREAKER_SLOW_CALL_RATE", d.SlowCallRate, 0.01, 1)
	c.OpenDuration = r.Duration("BREAKER_OPEN_DURATION", d.OpenDuration, time.Millisecond, time.Hour)
	c.OpenJitter = r.Duration("BREAKER_OPEN_JITTER", d.OpenJitter, 0, time.Hour)
	c.AbandonedHold = r.Duration("PAYMENT_ABANDONED_HOLD", d.AbandonedHold, 0, time.Hour)
	c.HalfOpenProbes = r.Int("BREAKER_HALF_OPEN_PROBES", d.HalfOpenProbes, 1, 1000)
	c.BulkheadWait = r.Duration("PAYMENT_BULKHEAD_WAIT", d.BulkheadWait, 0, time.Minute)
	c.LimitInitial = r.Int("PAYMENT_LIMIT_INITIAL", d.LimitInitial, 1, 10_000)
	c.LimitMin = r.Int("PAYMENT_LIMIT_MIN", d.LimitMin, 1, 10_000)
	c.LimitMax = r.Int("PAYMENT_LIMIT_MAX", d.LimitMax, 1, 10_000)
	// PAYMENT_LIMIT=static: the article's fixed bulkhead, a limit whose
	// minimum is its maximum.
	if r.OneOf("PAYMENT_LIMIT", "adaptive", "adaptive", "static") == "static" {
		n := r.Int("PAYMENT_BULKHEAD_SIZE", staticBulkhead, 1, 10_000)
		c.LimitInitial, c.LimitMin, c.LimitMax = n, n, n
	}
	c.LimitBackoff = r.Float("PAYMENT_LIMIT_BACKOFF", d.LimitBackoff, 0.5, 0.99)
	c.LimitLateFactor = r.lateFactor(d.LimitLateFactor)
	return c
}

// staticBulkhead is PAYMENT_BULKHEAD_SIZE's default: the article's 4.
const staticBulkhead = 4

// Mode reads RESILIENCE_MODE (none, timeout, protected; default protected).
func (r *Reader) Mode() resilience.Mode {
	m, _ := resilience.ParseMode(r.OneOf("RESILIENCE_MODE", "protected", "none", "timeout", "protected"))
	return m
}

// lateFactor reads PAYMENT_LIMIT_LATE_FACTOR, the margin over the 99th
// percentile of recent successful calls' latency past which a call in
// flight is late: 0 or 1 to 10. At 0 no call
// is late before the breaker's slow threshold: the adaptive limit then hears
// of a congested call at the slow threshold, as the breaker does.
func (r *Reader) lateFactor(d float64) float64 {
	if f := r.Float("PAYMENT_LIMIT_LATE_FACTOR", d, 0, 10); f == 0 || f >= 1 {
		return f
	}
	r.fail("PAYMENT_LIMIT_LATE_FACTOR", r.lookup("PAYMENT_LIMIT_LATE_FACTOR"), "0 (off) or a number from 1 to 10")
	return d
}

// CatalogBreaker reads the catalog policy's breaker settings over the
// defaults d: the payment's BREAKER_* names with a CATALOG_ prefix, and
// the same ranges. The catalog's breaker sees only cache misses, so its
// window may well want other values than the payment's.
func (r *Reader) CatalogBreaker(d resilience.Config) resilience.Config {
	// Each name is spelled out, not built from a prefix: deploy/k8s's
	// TestCodeFacts reads the names the binaries parse from these literals.
	d.WindowSize = r.Int("CATALOG_BREAKER_WINDOW", d.WindowSize, 1, 1000)
	d.MinCalls = r.Int("CATALOG_BREAKER_MIN_CALLS", d.MinCalls, 1, 1000)
	d.FailureRate = r.Float("CATALOG_BREAKER_FAILURE_RATE", d.FailureRate, 0.01, 1)
	d.SlowCallThreshold = r.Duration("CATALOG_BREAKER_SLOW_CALL_THRESHOLD", d.SlowCallThreshold, time.Millisecond, time.Minute)
	d.SlowCallRate = r.Float("CATALOG_BREAKER_SLOW_CALL_RATE", d.SlowCallRate, 0.01, 1)
	d.OpenDuration = r.Duration("CATALOG_BREAKER_OPEN_DURATION", d.OpenDuration, time.Millisecond, time.Hour)
	d.OpenJitter = r.Duration("CATALOG_BREAKER_OPEN_JITTER", d.OpenJitter, 0, time.Hour)
	d.HalfOpenProbes = r.Int("CATALOG_BREAKER_HALF_OPEN_PROBES", d.HalfOpenProbes, 1, 1000)
	return d
}
