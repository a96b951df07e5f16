package resilience

import (
	"context"
	"time"
)

// backoff is the full-jitter delay before retry n (n ≥ 1): uniform in
// [0, min(max, base·2^(n-1))). Full jitter spreads the retries of callers
// an outage failed together (AWS Architecture Blog, "Exponential Backoff
// And Jitter").
func backoff(n int, base, maxDelay time.Duration, rnd func(int64) int64) time.Duration {
	ceiling := base
	for i := 1; i < n && ceiling < maxDelay; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, maxDelay)
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rnd(int64(ceiling)))
}

// budgetAllows reports whether ctx leaves more than d before its deadline.
func budgetAllows(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) > d
}
