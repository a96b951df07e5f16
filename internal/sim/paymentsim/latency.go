package paymentsim

import (
	"math"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// MaxLatencySigma bounds a log-normal's σ, in the configuration and in faults. At σ 3 the
// 99th percentile is already about 1,000 times the median; beyond it a draw near the top of
// the random source would no longer fit a time.Duration.
const MaxLatencySigma = 3

// A request's processing time (a create's or a read's) comes from one of two distributions. The seed's is uniform,
// Config.Latency ± Config.Jitter. The other is log-normal, the shape measured service
// latencies usually take: most calls near the median and a long right tail. It is named by
// its median and σ (the standard deviation of the time's logarithm), and may be truncated at
// a cap. A positive Config.LatencySigma picks it for a whole run; a fault's latency_median
// picks it while the fault is active.
type logNormal struct {
	median time.Duration
	sigma  float64
	cap    time.Duration // 0: no cap
}

// quantile returns the processing time at quantile u, a number in [0, 1) from the simulator's
// random source, so one random number makes one draw and a fixed source a fixed time.
//
// The cap truncates by redrawing, not by clamping: clamping would pile every draw above the
// cap onto the cap itself, a spike a client's latency histogram would show. Redrawing an
// over-cap draw from the whole distribution would keep the shape but pull the median below
// the named one (by 7 % at median 120 ms, σ 0.8, cap 380 ms). So an over-cap draw, which
// is always above the median, is redrawn from the upper half alone: half the draws still
// fall below the named median, the lower half keeps its shape, and the upper half's is
// scaled to end at the cap. quantile computes that directly, by mapping the upper half of
// u onto the part of the upper half below the cap, instead of looping.
func (d logNormal) quantile(u float64) time.Duration {
	if d.sigma == 0 {
		return d.median
	}
	p := 2*u - 1 // the normal's quantile is √2·erfinv(p)
	if d.cap > 0 && p > 0 {
		// erf(c/√2) is the share of the upper half below the cap, c its z-score.
		c := math.Log(float64(d.cap)/float64(d.median)) / d.sigma
		p *= math.Erf(c / math.Sqrt2)
	}
	z := math.Sqrt2 * math.Erfinv(p)
	return scale(d.median, math.Exp(d.sigma*z))
}

// slowerThan orders two distributions for merging overlapping faults: the larger median,
// then the larger σ, then the higher cap (none is highest).
func (d logNormal) slowerThan(e logNormal) bool {
	switch {
	case d.median != e.median:
		return d.median > e.median
	case d.sigma != e.sigma:
		return d.sigma > e.sigma
	}
	return e.cap != 0 && (d.cap == 0 || d.cap > e.cap)
}

// scale returns d × factor, saturating instead of overflowing.
func scale(d time.Duration, factor float64) time.Duration {
	ns := float64(d) * factor
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// latency draws a request's processing time: from the log-normal of fault when it names one,
// else from the configured distribution; then it multiplies it by fault's latency_factor.
// It takes one number from the random source, as the seed's uniform draw always has.
func (s *Simulator) latency(fault Fault) time.Duration {
	u := s.srv.Random()
	var d time.Duration
	switch {
	case fault.LatencyMedian > 0:
		d = fault.distribution().quantile(u)
	case s.cfg.LatencySigma > 0:
		d = logNormal{median: s.cfg.Latency, sigma: s.cfg.LatencySigma, cap: s.cfg.LatencyCap}.quantile(u)
	default:
		d = simulator.Jittered(s.cfg.Latency, s.cfg.Jitter, func() float64 { return u })
	}
	if fault.LatencyFactor > 0 {
		d = scale(d, fault.LatencyFactor)
	}
	return d
}
