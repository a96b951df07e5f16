package experiment

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Settings are payment protection settings (docs/operations.md lists them)
// derived from a provider's latency rather than the demo's defaults, which are for a
// provider answering in about 200 ms. The matrix's slow-provider row runs checkout and the
// worker with them. The late-call point needs no setting: the adaptive limit takes it from
// the 99th percentile of the calls it sees.
type Settings struct {
	// AttemptTimeout is the latency's p99.9: an attempt is given up on only when it is
	// slower than all but one healthy call in a thousand.
	AttemptTimeout time.Duration
	// SlowThreshold is its p99: the breaker counts a call slow past it, so a healthy
	// provider's tail stays below the slow-call rate.
	SlowThreshold time.Duration
	// Budget is the synchronous charge's deadline: one whole attempt.
	Budget time.Duration
	// LimitMax is Little's law at the tail — rate × p99 — the most calls in flight when each
	// takes as long as the p99; APIPool is the same, as every such request holds an API slot.
	LimitMax int
	APIPool  int
	// LimitInitial is Little's law at the median — rate × p50 — the calls in flight the load
	// needs at first: starting lower, the limit grows one slot per healthy call, which takes
	// seconds when a call takes 600 ms. BulkheadWait is half the median, as the demo's 100 ms
	// is half its 200 ms calls: a call waits for a slot about as long as one frees.
	LimitInitial int
	BulkheadWait time.Duration
}

// DeriveSettings derives Settings for a provider whose latency is log-normal with the given
// median and σ, under rate requests per second.
func DeriveSettings(median time.Duration, sigma, rate float64) Settings {
	p99, p999 := LogNormalQuantile(median, sigma, 0.99), LogNormalQuantile(median, sigma, 0.999)
	// Rounded up to 10 ms, so a setting is never below the quantile it stands for.
	up := func(d time.Duration) time.Duration {
		return (d + 10*time.Millisecond - 1).Truncate(10 * time.Millisecond)
	}
	inFlight := int(math.Ceil(rate * p99.Seconds()))
	return Settings{
		AttemptTimeout: up(p999),
		SlowThreshold:  up(p99),
		Budget:         up(p999),
		LimitMax:       inFlight,
		APIPool:        inFlight,
		LimitInitial:   min(inFlight, int(math.Ceil(rate*median.Seconds()))),
		BulkheadWait:   up(median / 2),
	}
}

// Env returns the settings as the environment checkout and the worker read.
func (s Settings) Env() []string {
	return []string{
		"PAYMENT_ATTEMPT_TIMEOUT=" + s.AttemptTimeout.String(),
		"BREAKER_SLOW_CALL_THRESHOLD=" + s.SlowThreshold.String(),
		"PAYMENT_BUDGET=" + s.Budget.String(),
		"PAYMENT_LIMIT_MAX=" + strconv.Itoa(s.LimitMax),
		"API_POOL_SIZE=" + strconv.Itoa(s.APIPool),
		"PAYMENT_LIMIT_INITIAL=" + strconv.Itoa(s.LimitInitial),
		"PAYMENT_BULKHEAD_WAIT=" + s.BulkheadWait.String(),
	}
}

// Note says what the settings are and how they were derived, for the matrix's row.
func (s Settings) Note(median time.Duration, sigma, rate float64) string {
	return fmt.Sprintf("settings derived from the latency (log-normal, median %v, σ %s; a quantile is median · exp(z·σ)): "+
		"PAYMENT_ATTEMPT_TIMEOUT = p99.9 = %v, BREAKER_SLOW_CALL_THRESHOLD = p99 = %v, PAYMENT_BUDGET = one attempt = %v, "+
		"PAYMENT_LIMIT_MAX = API_POOL_SIZE = rate × p99 = %s × %v = %d (Little's law at the tail), "+
		"PAYMENT_LIMIT_INITIAL = rate × p50 = %d (at the median), PAYMENT_BULKHEAD_WAIT = p50 / 2 = %v",
		median, strconv.FormatFloat(sigma, 'f', -1, 64), s.AttemptTimeout, s.SlowThreshold, s.Budget,
		strconv.FormatFloat(rate, 'f', -1, 64), s.SlowThreshold, s.LimitMax, s.LimitInitial, s.BulkheadWait)
}

// LogNormalQuantile returns the p-quantile (0 < p < 1) of a log-normal latency of the given
// median and σ: median · exp(z_p · σ), z_p the standard normal quantile.
func LogNormalQuantile(median time.Duration, sigma, p float64) time.Duration {
	z := math.Sqrt2 * math.Erfinv(2*p-1)
	return time.Duration(float64(median) * math.Exp(z*sigma))
}
