// Package resilience keeps one slow or failing dependency from taking the
// whole service down with it. A call goes through a [Policy] named after
// the dependency; [Do] runs it through the layers of docs/design.md,
// "Protection stack", outermost first:
//
//	retry → circuit breaker → concurrency limit → per-attempt timeout → call
//
// The caller owns the fallback and decides on the typed result: [ErrOpen]
// or [ErrTooManyRequests] (the breaker refused; [Policy.RetryAfter] says
// when to come back), [ErrBulkheadFull], [ErrPaced], [ErrProbeFailed],
// [ErrTimeout], or the call's own error; [Refused] reports that nothing was
// sent. What counts as a failure is the caller's call ([Options.Classify]).
// The rules of the breaker and the AIMD limit are tabled in docs/design.md,
// "The payment limit's rules".
package resilience
