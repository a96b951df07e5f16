// Package experiment reproduces the article's outage measurement against a running stack
// (docs/design.md, "Experiment"). It drives checkout with an open-loop load while probing /health,
// scripts a fault through a simulator's admin API — the payment provider's (paymentsim) or the
// product catalog's (catalogsim) — follows the faulted dependency's breaker and concurrency
// limit through checkout's /metrics, then waits for the worker to drain the deferred orders and
// audits Postgres and the provider's ledger. NewMatrix and WriteMatrix condense the runs of
// the scenario matrix (scripts/experiment-matrix) into its one table.
//
// A run whose own load generator fell behind schedule is refused with a *ScheduleError: late
// requests would measure the tool, not the service, and would hide a cascade by sending less
// load than claimed — the article's tool refused for a stalled event loop for the same reason.
package experiment

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// FaultKind is the provider trouble scripted during the outage window.
type FaultKind string

// The fault kinds the simulator offers that an outage scenario uses.
const (
	FaultLatency FaultKind = "latency" // answers, but only after OutageLatency
	FaultDown    FaultKind = "down"    // answers 503 at once
	FaultHang    FaultKind = "hang"    // never answers while the window lasts
	FaultNone    FaultKind = "none"    // no fault: the provider stays healthy (the ramp)
	// FaultBrownout makes every charge LatencyFactor times slower (provider only).
	FaultBrownout FaultKind = "brownout"
	// FaultErrors answers a share ErrorRate of charges with ErrorStatus (provider only).
	FaultErrors FaultKind = "errors"
)

// Target is the dependency a run faults, named as checkout's resilience policy for it is.
type Target string

// The dependencies a run can fault.
const (
	TargetPayment Target = "payment" // the payment provider, through paymentsim's admin API
	TargetCatalog Target = "catalog" // the product catalog, through catalogsim's admin API
)

// Config describes one run. DefaultConfig returns the outage scenario; the URLs must be set.
type Config struct {
	// CheckoutURL is checkout's API base URL, e.g. http://localhost:8080, or several
	// separated by commas (a fleet run): orders and /health probes then go to them in
	// turn, round-robin, and the breaker band follows the first.
	CheckoutURL    string
	SimulatorURL   string // paymentsim base URL (its admin API), e.g. http://localhost:8082
	SimulatorToken string // bearer token of the simulator's admin API, if it has one
	DatabaseURL    string // the Postgres checkout writes to, for the audit
	// WorkerURL is the worker's base URL (its /metrics), or several separated by commas; when
	// set, the recovery figures also sample the workers' payment limits and the slots of them
	// taken, summed over the workers. Empty: not sampled.
	WorkerURL string

	// CatalogURL is catalogsim's base URL, e.g. http://localhost:8083, when checkout checks
	// prices against it (CATALOG_URL): the run then resets it, orders the SKUs of its price
	// list at its prices, and clears its faults afterwards. Empty: checkout trusts prices, and
	// every order is one SKU-1 at 1299 USD.
	CatalogURL   string
	CatalogToken string // bearer token of catalogsim's admin API, if it has one

	// FaultTarget is the dependency the fault is scripted on; empty means TargetPayment.
	FaultTarget Target

	// Label names the run in reports, typically the resilience mode under test.
	Label string
	// Row names the scenario-matrix row the run belongs to (docs/design.md, "Experiment"),
	// and Note says what the matrix should tell about it, such as the settings it derived;
	// both empty outside the matrix.
	Row, Note string

	Rate     float64       // checkout requests per second, issued on schedule (open loop)
	Duration time.Duration // how long load and probes are issued
	// RateTo, when positive, ramps the rate linearly from Rate at the start to RateTo at the
	// end of Duration.
	RateTo float64

	OutageStart   time.Duration // when the fault begins, from the run's start
	OutageFor     time.Duration // how long it lasts; ignored for FaultNone
	Fault         FaultKind
	OutageLatency time.Duration // the added latency of FaultLatency
	// LatencyFactor multiplies every charge's processing time during a FaultBrownout.
	LatencyFactor float64
	// ErrorRate is the share of charges, 0 to 1, answered ErrorStatus during a FaultErrors.
	ErrorRate   float64
	ErrorStatus int
	// Repeat, above 1, makes the fault come back that many times, every RepeatEvery from
	// OutageStart, each time for OutageFor: a flapping provider.
	Repeat      int
	RepeatEvery time.Duration
	// RateAfter, when positive, is the rate from the end of the (last) fault on: a backlog
	// built at Rate while the provider is down, then live load beside its drain.
	RateAfter float64

	RequestTimeout  time.Duration // when a checkout client gives up
	HealthInterval  time.Duration
	HealthTimeout   time.Duration // when a /health probe gives up
	MetricsInterval time.Duration // how often /metrics is read for the breaker state and limit
	DrainTimeout    time.Duration // how long to wait for the worker to settle every order

	// MaxLag is how late a request or probe may be issued before the run is refused.
	MaxLag time.Duration

	// LiveAfter is how long after the fault ends an order counts as live in the report's
	// Recovery; ProviderLatency is the healthy provider's latency, for the ideal drain time
	// (0: not reported).
	LiveAfter       time.Duration
	ProviderLatency time.Duration

	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the article's scenario (docs/design.md, "Experiment"): 6 s at 20 req/s with a 3 s client
// timeout, /health every 250 ms with a 2 s timeout, the provider 10 s slow from 0.5 s to 3.5 s.
func DefaultConfig() Config {
	return Config{
		Rate:            20,
		Duration:        6 * time.Second,
		OutageStart:     500 * time.Millisecond,
		OutageFor:       3 * time.Second,
		Fault:           FaultLatency,
		OutageLatency:   10 * time.Second,
		RequestTimeout:  3 * time.Second,
		HealthInterval:  250 * time.Millisecond,
		HealthTimeout:   2 * time.Second,
		MetricsInterval: 50 * time.Millisecond,
		DrainTimeout:    60 * time.Second,
		MaxLag:          20 * time.Millisecond,
		LiveAfter:       time.Second,
		ProviderLatency: 200 * time.Millisecond, // paymentsim's default
	}
}

// RecoveryConfig returns the recovery run of docs/design.md, "After an outage": the provider
// down (fast 503s) for the first 20 s of a 60 s run at 30 req/s, then healthy — at 100 ms a
// charge with a capacity of 16 (start paymentsim so: PAYMENTSIM_LATENCY=100ms, its default
// capacity) — while orders keep arriving. Orders sent 5 s after the provider is back count as
// live.
func RecoveryConfig() Config {
	c := DefaultConfig()
	c.Rate, c.Duration = 30, 60*time.Second
	c.Fault, c.OutageStart, c.OutageFor, c.OutageLatency = FaultDown, 0, 20*time.Second, 0
	c.LiveAfter, c.ProviderLatency = 5*time.Second, 100*time.Millisecond
	c.DrainTimeout = 2 * time.Minute
	return c
}

// RampConfig returns the ramp of docs/design.md, "Experiment": the provider healthy throughout, checkout from 10 to
// 80 req/s over 20 s, so the concurrency limit has to track rate × latency from 2 calls in
// flight to 16. The rest is DefaultConfig's.
func RampConfig() Config {
	c := DefaultConfig()
	c.Rate, c.RateTo, c.Duration = 10, 80, 20*time.Second
	c.Fault, c.OutageStart, c.OutageFor, c.OutageLatency = FaultNone, 0, 0, 0
	return c
}

// CatalogOutageConfig returns the catalog's outage: 20 req/s for 25 s, the catalog down for
// 10 s after a 5 s warm-up in which the load orders every SKU of the price list many times
// over, so the stale cache holds all of them when the catalog goes. The 10 s after the outage
// leave time for the catalog breaker, whose open time grows with each failed probe, to close
// again. The payment provider stays healthy. CatalogURL must be set.
func CatalogOutageConfig() Config {
	c := DefaultConfig()
	c.FaultTarget, c.Fault = TargetCatalog, FaultDown
	c.Duration, c.OutageStart, c.OutageFor, c.OutageLatency = 25*time.Second, 5*time.Second, 10*time.Second, 0
	return c
}

// CatalogColdStartConfig returns the catalog down from t=0 for 5 s of a 10 s run at 20 req/s,
// against a checkout that has not looked up a price yet: there is no stale answer to fall
// back on. CatalogURL must be set.
func CatalogColdStartConfig() Config {
	c := CatalogOutageConfig()
	c.Duration, c.OutageStart, c.OutageFor = 10*time.Second, 0, 5*time.Second
	return c
}

// target returns the faulted dependency, TargetPayment when unset.
func (c Config) target() Target { return cmp.Or(c.FaultTarget, TargetPayment) }

// checkouts returns the checkout base URLs of CheckoutURL.
func (c Config) checkouts() []string { return strings.Split(c.CheckoutURL, ",") }

// workers returns the worker base URLs of WorkerURL, none when it is empty.
func (c Config) workers() []string {
	if c.WorkerURL == "" {
		return nil
	}
	return strings.Split(c.WorkerURL, ",")
}

func (c Config) validate() error {
	var errs []error
	urls := [][2]string{{"simulator URL", c.SimulatorURL}}
	for _, raw := range c.checkouts() {
		urls = append(urls, [2]string{"checkout URL", raw})
	}
	for _, raw := range c.workers() {
		urls = append(urls, [2]string{"worker URL", raw})
	}
	if c.CatalogURL != "" {
		urls = append(urls, [2]string{"catalog URL", c.CatalogURL})
	}
	for _, u := range urls {
		if parsed, err := url.Parse(u[1]); err != nil || parsed.Scheme == "" || parsed.Host == "" {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute URL", u[0], u[1]))
		}
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("database URL is required for the audit"))
	}
	switch c.target() {
	case TargetPayment:
		switch c.Fault {
		case FaultLatency, FaultDown, FaultHang, FaultNone:
		case FaultBrownout:
			if c.LatencyFactor <= 1 {
				errs = append(errs, errors.New("latency factor must be above 1 for a brownout"))
			}
		case FaultErrors:
			if c.ErrorRate <= 0 || c.ErrorRate > 1 {
				errs = append(errs, errors.New("error rate must be above 0 and at most 1 for an error burst"))
			}
			if c.ErrorStatus < 400 || c.ErrorStatus > 599 {
				errs = append(errs, fmt.Errorf("error status %d is not a 4xx or 5xx status", c.ErrorStatus))
			}
		default:
			errs = append(errs, fmt.Errorf("fault %q is not one of latency, down, hang, brownout, errors, none", c.Fault))
		}
	case TargetCatalog:
		if c.CatalogURL == "" {
			errs = append(errs, errors.New("catalog URL is required to fault the catalog"))
		}
		// catalogsim has no hang: a read that never answers is a latency fault longer than
		// checkout's catalog budget.
		switch c.Fault {
		case FaultLatency, FaultDown, FaultNone:
		default:
			errs = append(errs, fmt.Errorf("fault %q is not one of latency, down, none for the catalog", c.Fault))
		}
	default:
		errs = append(errs, fmt.Errorf("fault target %q is not one of payment, catalog", c.FaultTarget))
	}
	if c.Rate <= 0 {
		errs = append(errs, errors.New("rate must be positive"))
	}
	if c.RateTo < 0 {
		errs = append(errs, errors.New("ramp end rate must not be negative"))
	}
	switch {
	case c.RateAfter < 0:
		errs = append(errs, errors.New("rate after the fault must not be negative"))
	case c.RateAfter > 0 && (c.RateTo > 0 || c.Fault == FaultNone):
		errs = append(errs, errors.New("a rate after the fault needs a fault and no ramp"))
	}
	if c.Repeat < 0 {
		errs = append(errs, errors.New("repeat must not be negative"))
	}
	if c.Repeat > 1 && c.RepeatEvery <= c.OutageFor {
		errs = append(errs, errors.New("a repeated fault's period must be longer than the fault, or its windows overlap"))
	}
	positive := map[string]time.Duration{
		"duration": c.Duration, "request timeout": c.RequestTimeout, "health interval": c.HealthInterval,
		"health timeout": c.HealthTimeout, "metrics interval": c.MetricsInterval, "drain timeout": c.DrainTimeout,
		"max lag": c.MaxLag,
	}
	if c.Fault != FaultNone {
		positive["outage length"] = c.OutageFor
	}
	for name, d := range positive {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	if c.OutageStart < 0 {
		errs = append(errs, errors.New("outage start must not be negative"))
	}
	if c.Fault == FaultLatency && c.OutageLatency <= 0 {
		errs = append(errs, errors.New("outage latency must be positive for a latency fault"))
	}
	return errors.Join(errs...)
}

// active returns when the fault is active.
func (c Config) active() faultTimes {
	if c.Fault == FaultNone {
		return faultTimes{}
	}
	return faultTimes{start: c.OutageStart, length: c.OutageFor, every: c.RepeatEvery, repeat: c.Repeat}
}

// liveRate is the rate of the orders sent after the fault.
func (c Config) liveRate() float64 { return cmp.Or(c.RateAfter, c.Rate) }

// inOutage reports whether a request scheduled at offset at falls in a fault window.
func (c Config) inOutage(at time.Duration) bool { return c.active().contains(at) }

// faultTimes is when a fault is active: repeat windows (one when repeat is 0) of length, every
// every from start. The zero faultTimes holds no time.
type faultTimes struct {
	start, length, every time.Duration
	repeat               int
}

// windows returns how many times the fault comes.
func (s faultTimes) windows() int { return max(s.repeat, 1) }

// window returns when the k-th window (from 0) begins and ends.
func (s faultTimes) window(k int) (from, to time.Duration) {
	from = s.start + time.Duration(k)*s.every
	return from, from + s.length
}

// contains reports whether offset at falls in one of the windows.
func (s faultTimes) contains(at time.Duration) bool {
	for k := range s.windows() {
		if from, to := s.window(k); at >= from && at < to {
			return true
		}
	}
	return false
}

// end is when the last window ends.
func (s faultTimes) end() time.Duration {
	_, to := s.window(s.windows() - 1)
	return to
}

// lead is how far ahead of t=0 the fault is scheduled and the breaker watch starts, so the
// first request goes out on time and the breaker's state before the load is known.
const lead = 100 * time.Millisecond

// Run performs one run and reports it. It leaves the simulators without faults, whatever
// happens. The error is a *ScheduleError when the run must not be reported.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.validate(); err != nil {
		return Report{}, fmt.Errorf("experiment configuration: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	db, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return Report{}, fmt.Errorf("connect to the database: %w", err)
	}
	defer db.Close(context.WithoutCancel(ctx))

	sim := newSimulator("paymentsim", cfg.SimulatorURL, cfg.SimulatorToken)
	// Each run starts from a clean, idle provider, so max in-flight and the ledger are this
	// run's alone: the simulator finishes requests whose client left, for as long as the
	// injected latency of an earlier run.
	if err := sim.clearFaults(ctx); err != nil {
		return Report{}, err
	}
	if err := sim.waitIdle(ctx, cfg.DrainTimeout); err != nil {
		return Report{}, err
	}
	defer sim.clearFaultsOnExit(ctx, log)
	if err := sim.reset(ctx); err != nil {
		return Report{}, err
	}
	load := newLoad(cfg, newRunID())
	faulted := sim
	if cfg.CatalogURL != "" {
		cat := newSimulator("catalogsim", cfg.CatalogURL, cfg.CatalogToken)
		defer cat.clearFaultsOnExit(ctx, log)
		if load.items, err = cat.startCatalog(ctx); err != nil {
			return Report{}, err
		}
		if cfg.target() == TargetCatalog {
			faulted = cat
		}
	}
	if err := load.ready(ctx); err != nil {
		return Report{}, err
	}

	start := time.Now().Add(lead)
	watch := watchBreaker(ctx, cfg, start)
	if cfg.Fault != FaultNone {
		if err := faulted.scheduleFault(ctx, cfg, start); err != nil {
			watch.stop()
			return Report{}, err
		}
	}
	log.Info("load started", "label", cfg.Label, "rate", cfg.Rate, "rate_to", cfg.RateTo, "duration", cfg.Duration,
		"fault_target", cfg.target(), "skus", len(load.items))
	recovery := watchRecovery(ctx, cfg, sim, load.customerID, start)
	samples := load.drive(ctx, start)
	breaker, limit, cache := watch.stop()
	if err := ctx.Err(); err != nil {
		return Report{}, err
	}
	lag, late := checkSchedule(samples, cfg.MaxLag)

	log.Info("load finished; waiting for the worker to settle every order", "drain_timeout", cfg.DrainTimeout)
	audit, err := drainAndAudit(ctx, db, sim, load.customerID, acknowledged(samples), cfg.DrainTimeout)
	seconds, workerErrors, werr := recovery.stop()
	if late != nil {
		// Refused only now, after the drain, so that a retry starts from a quiet stack.
		return Report{}, late
	}
	if err != nil {
		return Report{}, err
	}
	if werr != nil {
		return Report{}, werr
	}
	report := newReport(cfg, start, samples, lag, breaker, limit, cache, audit)
	if cfg.Fault != FaultNone && cfg.target() == TargetPayment {
		rec, err := measureRecovery(ctx, db, sim, cfg, start, samples, seconds)
		if err != nil {
			return Report{}, err
		}
		rec.WorkerPollErrors = workerErrors
		report.Recovery = &rec
	}
	return report, nil
}

// newRunID names a run's orders, so the audit finds exactly this run's rows in a database
// that earlier runs also wrote to.
func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
