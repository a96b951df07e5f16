// Package resilience keeps one slow or failing dependency from taking the
// whole service down with it.
//
// A call to a dependency goes through a [Policy] named after it. [Do] runs
// it through the layers docs/design.md, "Protection stack" fixes, outermost
// first:
//
//	retry → circuit breaker → concurrency limit → per-attempt timeout → call
//
// and the caller, which owns the fallback, decides on the typed result:
// [ErrOpen] and [ErrTooManyRequests] (the breaker refused; [Policy.RetryAfter]
// says when to come back), [ErrBulkheadFull] (the limit stayed reached for
// its wait), [ErrPaced] (its turn under [Config.Rate] comes too late),
// [ErrProbeFailed], [ErrTimeout], or the call's own error, reachable with
// errors.Is and errors.As. [Refused] tells the refusals apart: nothing was
// sent.
//
// The breaker is gobreaker v2's two-step breaker with a count window of the
// last calls beside it, and a slow-call rule that counts a call as a
// failure the moment it runs past the slow threshold, while still in
// flight. The concurrency limit is AIMD (a fixed bulkhead when its minimum
// is its maximum); its rules are numbered in limit.go and tabled
// in docs/design.md. [Pool] is the same bounded concurrency at the HTTP
// edge, so that /health keeps its own slots.
//
// The package knows nothing of orders or payments: what counts as a
// failure of the dependency is the caller's call, through [Options.Classify].
package resilience
