// Package resilience keeps one slow or failing dependency from taking the
// whole service down with it.
//
// A request that needs a dependency (the payment provider, say) goes through
// a [Policy] named after that dependency. [Do] runs the call through the
// layers docs/design.md, "Protection stack" fixes, outermost first:
//
//	retry → circuit breaker → concurrency limit → per-attempt timeout → call
//
// and the caller, which owns the fallback, turns the typed result into a
// decision: [ErrOpen] and [ErrTooManyRequests] mean the breaker refused the
// call ([Policy.RetryAfter] says when it will next let a probe through),
// [ErrBulkheadFull] means the concurrency limit stayed reached for the whole
// bounded wait, [ErrTimeout]
// means an attempt ran out of time; any other error is the call's own, still
// reachable with errors.Is and errors.As.
//
// The breaker is gobreaker v2's two-step breaker with two rules gobreaker
// lacks, added beside it: a count window of the last calls, so it trips on a
// failure rate as the article's demo does; and a slow-call rule that counts a
// call as a failure the moment it runs past the slow threshold, while it is
// still in flight (gobreaker itself counts a call only once it returns), so
// hung calls trip the breaker before they time out instead of piling up.
//
// The concurrency limit is adaptive by default ([LimitAdaptive]): AIMD
// between [Config.LimitMin] and [Config.LimitMax], growing while healthy
// calls press on it and halving on each congested one. It hears of a call
// when the call is late, before the breaker's slow threshold: at the late
// factor times the 99th percentile of recent successful calls' latency,
// never sooner than half the threshold nor later than it (the threshold
// itself before a few calls have succeeded). So a hung dependency shrinks
// it before any call completes, while a healthy one's long tail does not;
// from 1.1 × the percentile until then, an overdue call holds new ones back, so
// they do not join it in a dependency that may be hanging. A call that
// goes over a limit full of slots held for calls the dependency never
// answered — the breaker's probe after a hang — may first ask a question
// that changes nothing there ([Options.Probe]), so that a dependency still
// hanging holds the question rather than the call's effect. [LimitStatic]
// is the fixed bulkhead of [Config.BulkheadSize] slots.
// [Config.MaxConcurrency] is the most calls either ever admits, which an
// HTTP client's connection cap should follow.
//
// [Pool] is the same bounded-concurrency idea at the HTTP edge: business
// routes share one pool and /health gets its own, so a saturated API cannot
// delay the liveness probe.
//
// The package is generic: it knows nothing of orders or payments. What counts
// as a failure of the dependency is the caller's call, made through
// [Options.Classify].
package resilience
