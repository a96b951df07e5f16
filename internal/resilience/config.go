package resilience

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Mode selects how much of the stack a [Policy] applies, so that the
// experiment can show what each layer buys.
type Mode uint8

const (
	// ModeProtected applies every layer. It is the zero value, so a Config
	// that forgets to set a mode is protected, not naked.
	ModeProtected Mode = iota
	// ModeTimeout applies the per-attempt timeout only.
	ModeTimeout
	// ModeNone passes the call straight through.
	ModeNone
)

var modeNames = [...]string{
	ModeProtected: "protected",
	ModeTimeout:   "timeout",
	ModeNone:      "none",
}

// ParseMode parses "none", "timeout" or "protected"; "" means protected.
func ParseMode(s string) (Mode, error) {
	if m := slices.Index(modeNames[:], cmp.Or(s, "protected")); m >= 0 {
		return Mode(m), nil
	}
	return 0, fmt.Errorf("resilience: unknown mode %q (want none, timeout or protected)", s)
}

func (m Mode) String() string { return nameOr(modeNames[:], m) }

// Config tunes a [Policy]: start from [DefaultConfig]; [New] checks [Config.Validate].
type Config struct {
	Mode Mode

	// AttemptTimeout bounds one attempt of the call (innermost layer).
	AttemptTimeout time.Duration

	// MaxAttempts counts the first attempt too: 2 means at most one retry.
	MaxAttempts int
	// The full-jitter backoff before retry n: uniform in [0, min(BackoffMax, BackoffBase·2^(n-1))).
	BackoffBase time.Duration
	BackoffMax  time.Duration

	// The breaker trips once its last WindowSize calls are MinCalls or more
	// and (failures+slow)/calls ≥ FailureRate or slow/calls ≥ SlowCallRate;
	// a call is slow, still running, once it has run for SlowCallThreshold.
	WindowSize        int
	MinCalls          int
	FailureRate       float64
	SlowCallRate      float64
	SlowCallThreshold time.Duration

	// OpenDuration plus a share of OpenJitter is how long the breaker stays open.
	OpenDuration time.Duration
	OpenJitter   time.Duration
	// AbandonedHold: a call given up on (timed out, or its caller left) runs
	// on, its slot taken, until answered or that long after it was sent
	// (L3); a probe still goes over held slots (L4). 0: cancelled at once.
	AbandonedHold time.Duration
	// HalfOpenProbes is how many calls the half-open breaker lets through;
	// that many successes in a row close it, one failure re-opens it.
	HalfOpenProbes int

	// The concurrency limit starts at LimitInitial and moves between
	// LimitMin and LimitMax (equal: a fixed bulkhead) by AIMD, × LimitBackoff
	// per congested call (L1). A call waits at most BulkheadWait for a slot.
	LimitInitial int
	LimitMin     int
	LimitMax     int
	LimitBackoff float64
	BulkheadWait time.Duration
	// LimitLateFactor × the 99th percentile of recent successful calls is
	// when a call in flight is late (L2); 0: at the slow threshold.
	LimitLateFactor float64
	// Background marks a policy no customer waits on, a worker's backlog:
	// its calls are late even while slots are held (L6) and before the
	// slow threshold (L10), its limit grows a slot per round trip before
	// it has a late point and above the limit a drop left (L9), and it
	// takes the fleet's probe lease after live processes.
	Background bool
	// Rate caps the calls a second, evenly spaced (P1); 0: no cap. Set it
	// below the dependency's rate limit by what the live calls need.
	Rate float64
}

// BreakDuration is how long the breaker stays open: OpenDuration plus up
// to OpenJitter (rnd returns a uniform int64 in [0, n)), so processes that
// opened together do not probe together.
func (c Config) BreakDuration(rnd func(int64) int64) time.Duration {
	d := c.OpenDuration
	if c.OpenJitter > 0 {
		d += time.Duration(rnd(int64(c.OpenJitter)))
	}
	return d
}

// MaxConcurrency is the most calls the policy lets run at once, 0 outside
// ModeProtected: an HTTP client's connection cap, so that no call queues
// unseen by the limit. With a hold, twice the limit's maximum: calls given up
// on keep their connections until answered (L3), and calls go beside them (L4).
func (c Config) MaxConcurrency() int {
	switch {
	case c.Mode != ModeProtected:
		return 0
	case c.AbandonedHold > 0:
		return 2 * c.LimitMax
	}
	return c.LimitMax
}

// DefaultConfig returns the defaults of docs/design.md, "Defaults": the
// article's demo values, for a provider answering in ~200 ms at p99, and
// ours where it has none. docs/operations.md, "Choosing the settings for
// your provider", derives each from a provider's latency and limits.
func DefaultConfig() Config {
	return Config{
		Mode:           ModeProtected,
		AttemptTimeout: 500 * time.Millisecond, // article: 500 ms

		MaxAttempts: 2,                     // article: 2 attempts at most
		BackoffBase: 50 * time.Millisecond, // article: full jitter from 50 ms
		BackoffMax:  time.Second,           // used only by callers that raise MaxAttempts

		WindowSize:        10,                     // article: the last 10 calls
		MinCalls:          10,                     // article: 10
		FailureRate:       0.5,                    // article: 50 %
		SlowCallThreshold: 400 * time.Millisecond, // article: 400 ms
		SlowCallRate:      0.5,                    // article: 50 %

		// Half the article's 1 s: a probe into a provider still hanging is
		// a lookup (L5), and a recovered one waits half as long.
		OpenDuration:   500 * time.Millisecond,
		HalfOpenProbes: 3, // article: 3
		// A fifth of the open duration spreads replicas' probes without
		// keeping a recovered provider waiting much longer.
		OpenJitter: 100 * time.Millisecond,
		// A provider's own request timeout, if it publishes one; the seed
		// outage's provider keeps a call 10 s.
		AbandonedHold: 10 * time.Second,

		// Half a healthy call (docs/operations.md derives it as p50 / 2):
		// longer only delays the fallback in a hang.
		BulkheadWait: 100 * time.Millisecond,
		// Where the article's bulkhead sits, right for 20 req/s × 200 ms;
		// slow start doubles it per round trip when the load needs more.
		LimitInitial: 4,
		// The least a congested provider still gets from this process.
		LimitMin: 1,
		// 80 req/s × 200 ms = 16 in flight, plus a quarter for jitter.
		LimitMax: 20,
		// TCP's multiplicative decrease (RFC 5681), the low end of Netflix's
		// AIMDLimit's [0.5, 1): a queueing provider needs its load cut decisively.
		LimitBackoff: 0.5,
		// A fifth past the slowest healthy calls (their 99th percentile):
		// ~265 ms for 200 ms ± 20 ms calls, before the breaker's 400 ms.
		LimitLateFactor: 1.2,
	}
}

// Validate reports every setting that is out of range, naming the field.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("resilience: "+format, args...))
		}
	}
	check(int(c.Mode) < len(modeNames), "Mode %d is not a mode", c.Mode)
	check(c.AttemptTimeout > 0, "AttemptTimeout %v must be positive", c.AttemptTimeout)
	check(c.MaxAttempts >= 1, "MaxAttempts %d must be at least 1", c.MaxAttempts)
	check(c.BackoffBase >= 0, "BackoffBase %v must not be negative", c.BackoffBase)
	check(c.BackoffMax >= c.BackoffBase, "BackoffMax %v must not be below BackoffBase %v", c.BackoffMax, c.BackoffBase)
	check(c.WindowSize >= 1, "WindowSize %d must be at least 1", c.WindowSize)
	check(c.MinCalls >= 1 && c.MinCalls <= c.WindowSize,
		"MinCalls %d must be between 1 and WindowSize %d", c.MinCalls, c.WindowSize)
	check(c.FailureRate > 0 && c.FailureRate <= 1, "FailureRate %v must be in (0, 1]", c.FailureRate)
	check(c.SlowCallRate > 0 && c.SlowCallRate <= 1, "SlowCallRate %v must be in (0, 1]", c.SlowCallRate)
	check(c.SlowCallThreshold > 0, "SlowCallThreshold %v must be positive", c.SlowCallThreshold)
	check(c.OpenDuration > 0, "OpenDuration %v must be positive", c.OpenDuration)
	check(c.OpenJitter >= 0, "OpenJitter %v must not be negative", c.OpenJitter)
	check(c.AbandonedHold == 0 || c.AbandonedHold >= c.AttemptTimeout, "AbandonedHold %v must be 0 or at least AttemptTimeout", c.AbandonedHold)
	check(c.HalfOpenProbes >= 1 && c.HalfOpenProbes <= math.MaxUint32,
		"HalfOpenProbes %d must be at least 1", c.HalfOpenProbes)
	check(c.BulkheadWait >= 0, "BulkheadWait %v must not be negative", c.BulkheadWait)
	check(c.LimitMin >= 1, "LimitMin %d must be at least 1", c.LimitMin)
	check(c.LimitMax >= c.LimitMin, "LimitMax %d must not be below LimitMin %d", c.LimitMax, c.LimitMin)
	check(c.LimitLateFactor == 0 || c.LimitLateFactor >= 1, "LimitLateFactor %v must be 0 or at least 1", c.LimitLateFactor)
	check(c.Rate >= 0, "Rate %v must not be negative", c.Rate)
	check(c.LimitInitial >= c.LimitMin && c.LimitInitial <= c.LimitMax,
		"LimitInitial %d must be between LimitMin %d and LimitMax %d", c.LimitInitial, c.LimitMin, c.LimitMax)
	check(c.LimitBackoff >= 0.5 && c.LimitBackoff < 1, "LimitBackoff %v must be in [0.5, 1)", c.LimitBackoff)
	return errors.Join(errs...)
}
