package resilience

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Mode selects how much of the stack a [Policy] applies. It exists so the
// experiment can show what each layer buys: run the same traffic in each
// mode and compare.
type Mode uint8

const (
	// ModeProtected applies every layer. It is the zero value, so a Config
	// that forgets to set a mode is protected, not naked.
	ModeProtected Mode = iota
	// ModeTimeout applies the per-attempt timeout only.
	ModeTimeout
	// ModeNone passes the call straight through: no timeout, no bulkhead,
	// no breaker, no retry.
	ModeNone
)

var modeNames = [...]string{
	ModeProtected: "protected",
	ModeTimeout:   "timeout",
	ModeNone:      "none",
}

// ParseMode parses "none", "timeout" or "protected"; the empty string means
// the default, protected.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return ModeProtected, nil
	}
	for m, name := range modeNames {
		if s == name {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("resilience: unknown mode %q (want none, timeout or protected)", s)
}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Config tunes a [Policy]. Start from [DefaultConfig] and override what the
// environment sets; [New] rejects a Config that fails [Config.Validate].
type Config struct {
	Mode Mode

	// AttemptTimeout bounds one attempt of the call (innermost layer).
	AttemptTimeout time.Duration

	// MaxAttempts counts the first attempt too: 2 means at most one retry.
	MaxAttempts int
	// BackoffBase and BackoffMax bound the full-jitter exponential backoff:
	// before retry n the policy sleeps a random duration in
	// [0, min(BackoffMax, BackoffBase·2^(n-1))).
	BackoffBase time.Duration
	BackoffMax  time.Duration

	// WindowSize is how many of the latest completed calls the breaker
	// judges; it trips once the window holds MinCalls calls and either
	// (failures+slow)/calls ≥ FailureRate or slow/calls ≥ SlowCallRate.
	WindowSize   int
	MinCalls     int
	FailureRate  float64
	SlowCallRate float64
	// SlowCallThreshold is how long a call may run before it counts as a
	// slow call, that is a failure, even though it is still running.
	SlowCallThreshold time.Duration

	// OpenDuration is how long the breaker stays open before it lets probes
	// through; each Policy adds its own random share of OpenJitter once, at
	// construction, so replicas that opened together don't probe together.
	OpenDuration time.Duration
	OpenJitter   time.Duration
	// HalfOpenProbes is how many calls the half-open breaker lets through;
	// that many successes in a row close it, one failure re-opens it.
	HalfOpenProbes int

	// BulkheadSize bounds the calls in flight to the dependency; a call
	// that finds it full waits at most BulkheadWait for a slot.
	BulkheadSize int
	BulkheadWait time.Duration
}

// DefaultConfig returns the defaults DESIGN.md fixes, which are the demo
// values of the article the project follows.
func DefaultConfig() Config {
	return Config{
		Mode:           ModeProtected,
		AttemptTimeout: 500 * time.Millisecond, // article: per-attempt timeout 500 ms

		MaxAttempts: 2,                     // article: 2 attempts at most
		BackoffBase: 50 * time.Millisecond, // article: full jitter from 50 ms
		// With two attempts only the first step (≤ 50 ms) is ever used; the
		// cap matters only for callers that raise MaxAttempts.
		BackoffMax: time.Second,

		WindowSize:        10,                     // article: the last 10 calls
		MinCalls:          10,                     // article: 10
		FailureRate:       0.5,                    // article: 50 %
		SlowCallThreshold: 400 * time.Millisecond, // article: 400 ms
		SlowCallRate:      0.5,                    // article: 50 %

		OpenDuration: time.Second, // article: 1 s
		// Not in the article, which runs one replica. A fifth of the open
		// duration spreads replicas' probes without keeping a recovered
		// provider waiting much longer.
		OpenJitter:     200 * time.Millisecond,
		HalfOpenProbes: 3, // article: 3

		BulkheadSize: 4, // article: 4 concurrent calls
		// Healthy calls take ~200 ms, so at 20 req/s the 4 slots are just
		// full (Little's law: 20/s × 0.2 s = 4) and bursts must queue a
		// little. 50 ms absorbs such a burst; waiting longer only delays the
		// fallback when slots are held by hung calls, which keep them for
		// the whole 500 ms attempt timeout.
		BulkheadWait: 50 * time.Millisecond,
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
	check(c.HalfOpenProbes >= 1 && c.HalfOpenProbes <= math.MaxUint32,
		"HalfOpenProbes %d must be at least 1", c.HalfOpenProbes)
	check(c.BulkheadSize >= 1, "BulkheadSize %d must be at least 1", c.BulkheadSize)
	check(c.BulkheadWait >= 0, "BulkheadWait %v must not be negative", c.BulkheadWait)
	return errors.Join(errs...)
}

// PoolConfig sizes an HTTP concurrency [Pool].
type PoolConfig struct {
	// Size bounds the requests the pool serves at once.
	Size int
	// MaxWait is how long a request may queue for a slot before it gets
	// 503 with Retry-After.
	MaxWait time.Duration
}

// DefaultAPIPool is the pool business routes share: 16 slots, the
// article's worker pool, and the 1 s queue wait DESIGN.md fixes.
func DefaultAPIPool() PoolConfig { return PoolConfig{Size: 16, MaxWait: time.Second} }

// DefaultHealthPool is the separate pool for /health: 4 slots, as in the
// article. Its handler touches no dependency and answers in microseconds,
// so a short wait only matters under a flood of probes.
func DefaultHealthPool() PoolConfig {
	return PoolConfig{Size: 4, MaxWait: 100 * time.Millisecond}
}

// Validate reports a size below 1 or a negative wait.
func (c PoolConfig) Validate() error {
	var errs []error
	if c.Size < 1 {
		errs = append(errs, fmt.Errorf("resilience: pool Size %d must be at least 1", c.Size))
	}
	if c.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("resilience: pool MaxWait %v must not be negative", c.MaxWait))
	}
	return errors.Join(errs...)
}
