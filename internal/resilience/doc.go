// Package resilience keeps one slow or failing dependency from taking the
// whole service down with it.
//
// A request that needs a dependency (the payment provider, say) goes through
// a [Policy] named after that dependency. [Do] runs the call through the
// layers DESIGN.md fixes, outermost first:
//
//	retry → circuit breaker → bulkhead → per-attempt timeout → call
//
// and the caller, which owns the fallback, turns the typed result into a
// decision: [ErrOpen] and [ErrTooManyRequests] mean the breaker refused the
// call ([Policy.RetryAfter] says when it will next let a probe through),
// [ErrBulkheadFull] means too many calls were already in flight, [ErrTimeout]
// means an attempt ran out of time; any other error is the call's own, still
// reachable with errors.Is and errors.As.
//
// The breaker is gobreaker v2's two-step breaker with two rules gobreaker
// lacks, added beside it: a count window of the last calls, so it trips on a
// failure rate as the article's demo does; and a slow-call rule that counts a
// call as a failure the moment it runs past the slow threshold, while it is
// still in flight (gobreaker issue #91), so hung calls trip the breaker
// before they time out instead of piling up.
//
// [Pool] is the same bounded-concurrency idea at the HTTP edge: business
// routes share one pool and /health gets its own, so a saturated API cannot
// delay the liveness probe.
//
// The package is generic: it knows nothing of orders or payments. What counts
// as a failure of the dependency is the caller's call, made through
// [Options.Classify].
package resilience
