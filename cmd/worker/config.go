package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/idempotency"
	"github.com/resilientcheckout/checkout/internal/ledger"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/telemetry"
	"github.com/resilientcheckout/checkout/internal/worker"
)

// config is every setting of the worker binary, read from the environment
// in one place. docs/operations.md lists each variable; a test keeps the two in sync.
type config struct {
	HTTPAddr        string
	LogLevel        string
	DebugAddr       string
	ShutdownTimeout time.Duration
	DrainDelay      time.Duration
	Database        database.Config
	Tracing         telemetry.TracingConfig
	Payment         payment.Config
	// PaymentErr is what is wrong with the provider's key, if anything: serve refuses to
	// start with it; commands that do not call the provider run.
	PaymentErr error
	Resilience resilience.Config
	// LedgerResilience is the stack the ledger walk's page reads go
	// through (policy "payment-ledger"), apart from the charges'.
	LedgerResilience resilience.Config
	FleetBreaker     bool // share the payment breaker with every process (internal/fleet)
	FleetListenURL   string
	Worker           worker.Config
	RiverUIUser      string
	RiverUIPassword  string
}

// workerResilienceDefaults adjusts the defaults (docs/design.md, "Defaults") for a background
// worker. It is always protected: RESILIENCE_MODE is the API's experiment
// switch, and a worker without a breaker would stampede a recovering
// provider with its whole backlog. No customer waits on a background
// charge, so the worker has nothing to gain from confirming an outage with
// more calls, each of which a hung provider keeps working on: its breaker
// may trip after 4 calls rather than 10, probes recovery with 1 call
// rather than 3, and its concurrency limit starts at 1 call and grows only
// while calls succeed (measured in the experiment: the provider's max
// in-flight during an outage drops by about as many calls as these save).
func workerResilienceDefaults() resilience.Config {
	d := resilience.DefaultConfig()
	d.Mode = resilience.ModeProtected
	d.MinCalls = 4
	d.HalfOpenProbes = 1
	d.LimitInitial = 1
	// The backlog gives way to live calls: its calls are late at the late
	// point even beside slots held after a hang, and checkouts take the
	// fleet's probe lease first.
	d.Background = true
	// A charge job that finds the limit full waits for a slot in its FIFO
	// rather than snoozing at once: River runs up to WORKER_CONCURRENCY
	// jobs, the limit decides how many of them call the provider, and the
	// others are ready the moment a slot frees. Past the wait it snoozes,
	// which uses no attempt.
	d.BulkheadWait = 2 * time.Second
	return d
}

// ledgerResilienceDefaults is the stack of the ledger walk's page reads:
// one page of up to a hundred charges at a time, each read given
// pageTimeout. A page is a read of another size and cost than a charge,
// and it moves no money, so nothing of the charges' stack fits it: not
// their 500 ms timeout (a slower page would never be read, and the walk
// would never advance), not their slow-call rule (a healthy provider's
// slow page would count against the charges' breaker, which the fleet
// shares, and defer live orders), not their limit or abandoned-call hold
// (a page would take a charge's slot). Its breaker opens on failures and
// timeouts only, so a provider that is down is not read page after page,
// and it is this policy's alone: it never joins the fleet.
func ledgerResilienceDefaults(pageTimeout time.Duration) resilience.Config {
	d := resilience.DefaultConfig()
	d.Mode = resilience.ModeProtected
	d.AttemptTimeout = pageTimeout
	d.SlowCallThreshold = pageTimeout
	d.MinCalls = 4
	d.HalfOpenProbes = 1
	d.LimitInitial, d.LimitMin, d.LimitMax = 1, 1, 1
	d.AbandonedHold = 0
	d.LimitLateFactor = 0
	return d
}

// defaultConcurrency is WORKER_CONCURRENCY's default: River's ceiling on
// charge jobs running at once, above the limit's maximum (20) so that jobs
// wait at the limit, not in River's queue.
const defaultConcurrency = 32

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	charge, schedule, walk := worker.DefaultChargePolicy(), worker.DefaultSchedule(), ledger.DefaultConfig()
	shutdownTimeout := env.Duration("SHUTDOWN_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute)
	// The worker is always protected (see workerResilienceDefaults); a
	// value meant for checkout's experiment must not pass silently here.
	env.OneOf("RESILIENCE_MODE", "protected", "protected")
	cfg := config{
		HTTPAddr:        env.Addr("HTTP_ADDR", ":8081"),
		LogLevel:        env.OneOf("LOG_LEVEL", "info", telemetry.Levels...),
		DebugAddr:       env.DebugAddr(),
		ShutdownTimeout: shutdownTimeout,
		DrainDelay:      env.Duration("SHUTDOWN_DRAIN_DELAY", httpserver.DefaultDrainDelay, 0, 5*time.Minute),
		Database:        env.Database(database.Config{MaxConns: 10, ConnectTimeout: 2 * time.Second, StatementTimeout: 5 * time.Second}),
		Tracing:         env.Tracing("worker"),
		FleetBreaker:    env.OneOf("FLEET_BREAKER", "on", "on", "off") == "on",
		FleetListenURL:  env.OptionalURL("FLEET_LISTEN_DATABASE_URL", "postgres", "postgresql"),
		Resilience:      env.Resilience(workerResilienceDefaults()),
		LedgerResilience: ledgerResilienceDefaults(
			env.Duration("LEDGER_PAGE_TIMEOUT", 10*time.Second, 100*time.Millisecond, 5*time.Minute)),
		Worker: worker.Config{
			Concurrency: env.Int("WORKER_CONCURRENCY", defaultConcurrency, 1, 1000),
			Charge: worker.ChargePolicy{
				GiveUpAfter:  env.Int("CHARGE_GIVE_UP_AFTER", charge.GiveUpAfter, 1, order.JobMaxAttempts-1),
				KeyRetention: env.Duration("PROVIDER_KEY_RETENTION", charge.KeyRetention, time.Second, 365*24*time.Hour),
				LookupAfter:  env.Duration("LOOKUP_AFTER", charge.LookupAfter, 0, time.Hour),
			},
			Schedule: worker.Schedule{
				SweepAfter:        env.Duration("SWEEP_AFTER", schedule.SweepAfter, time.Second, 24*time.Hour),
				SweepInterval:     env.Duration("SWEEP_INTERVAL", schedule.SweepInterval, time.Second, 24*time.Hour),
				ReconcileAfter:    env.Duration("RECONCILE_AFTER", schedule.ReconcileAfter, time.Second, 24*time.Hour),
				ReconcileInterval: env.Duration("RECONCILE_INTERVAL", schedule.ReconcileInterval, time.Second, 24*time.Hour),
			},
			// Must exceed the job timeout (checkTimings): River rescues a
			// job only once it has run this long, so a worker killed
			// mid-charge has its job retried.
			Ledger: ledger.Config{
				Interval: env.Duration("LEDGER_RECONCILE_INTERVAL", walk.Interval, time.Second, 24*time.Hour),
				Grace:    env.Duration("LEDGER_RECONCILE_GRACE", walk.Grace, time.Second, 24*time.Hour),
				Late:     env.Duration("LEDGER_RECONCILE_LATE", walk.Late, 0, 24*time.Hour),
				Lookback: env.Duration("LEDGER_RECONCILE_LOOKBACK", walk.Lookback, time.Minute, 365*24*time.Hour),
			},
			RescueStuckJobsAfter: env.Duration("RESCUE_STUCK_JOBS_AFTER", time.Minute, time.Second, time.Hour),
			KeyRetention:         env.Duration("IDEMPOTENCY_KEY_RETENTION", idempotency.MinRetention, idempotency.MinRetention, 365*24*time.Hour),
			PruneInterval:        env.Duration("IDEMPOTENCY_PRUNE_INTERVAL", time.Hour, time.Second, 24*time.Hour),
			ShutdownTimeout:      shutdownTimeout,
			// true behind a pooler in transaction mode, where LISTEN cannot
			// work (docs/operations.md, "PgBouncer").
			PollOnly: env.OneOf("RIVER_POLL_ONLY", "false", "true", "false") == "true",
		},
		RiverUIUser:     env.String("RIVERUI_USER", ""),
		RiverUIPassword: env.String("RIVERUI_PASSWORD", ""),
	}
	// The backlog's pace, in charges a second: the provider's rate limit less
	// what live orders need at their peak (docs/operations.md, "Choosing the
	// settings for your provider"). 0, the default, sets no pace: the limit
	// and the provider's 429s pace the backlog alone.
	cfg.Resilience.Rate = env.Float("PAYMENT_BACKLOG_RATE", 0, 0, 100_000)
	// Checkout's request deadlines, under checkout's names and defaults:
	// the worker does not use them, it only checks SWEEP_AFTER against
	// them (checkTimings), so they must be set as checkout's are.
	defaults := order.DefaultConfig()
	checkout := order.Config{PaymentBudget: env.PaymentBudget(defaults.PaymentBudget), DBTimeout: env.TxTimeout(defaults.DBTimeout)}
	// River UI cancels, retries and deletes jobs: open only on loopback,
	// with basic auth, or when the operator opts out.
	riverUI := envconfig.Guarded{
		Surface: "River UI", AddrVar: "HTTP_ADDR", Addr: cfg.HTTPAddr,
		Credential: "RIVERUI_USER and RIVERUI_PASSWORD", Protected: cfg.RiverUIUser != "",
		OptOut: "ALLOW_UNAUTHENTICATED_RIVERUI", Allowed: env.OneOf("ALLOW_UNAUTHENTICATED_RIVERUI", "false", "true", "false") == "true",
	}
	// River retries failed jobs on its own schedule (worker.ChargeWorker's
	// NextRetry); retrying inside a job as well would multiply attempts.
	cfg.Resilience.MaxAttempts = 1
	cfg.Payment, cfg.PaymentErr = env.Payment()
	if err := env.Err(); err != nil {
		return cfg, err
	}
	if (cfg.RiverUIUser == "") != (cfg.RiverUIPassword == "") {
		return cfg, errors.New("RIVERUI_USER and RIVERUI_PASSWORD must be set together")
	}
	if err := cfg.Resilience.Validate(); err != nil {
		return cfg, fmt.Errorf("PAYMENT_*/BREAKER_* settings: %w", err)
	}
	if err := cfg.LedgerResilience.Validate(); err != nil {
		return cfg, fmt.Errorf("LEDGER_PAGE_TIMEOUT: %w", err)
	}
	return cfg, errors.Join(checkTimings(cfg, checkout), riverUI.Check())
}

// checkTimings reports every pair of settings that is valid alone but
// wrong together, naming both variables.
func checkTimings(cfg config, checkout order.Config) error {
	var errs []error
	// A lookup's "no charge" is final (the order fails), so it must come
	// after every attempt can have ended at the provider: the attempt
	// timeout bounds how long the worker waits; a call given up on is not
	// cancelled, so it may still reach the provider once its connection is
	// up (the client's connect timeout), which may then keep it as long as
	// the abandoned-call hold.
	inFlight, inFlightVar := cfg.Resilience.AttemptTimeout, "PAYMENT_ATTEMPT_TIMEOUT"
	if hold := cfg.Resilience.AbandonedHold; hold > 0 && hold+cfg.Payment.ConnectTimeout() > inFlight {
		inFlight, inFlightVar = hold+cfg.Payment.ConnectTimeout(), "PAYMENT_ABANDONED_HOLD and the connect timeout"
	}
	if lookup := cfg.Worker.Charge.LookupAfter; lookup < inFlight {
		errs = append(errs, fmt.Errorf("LOOKUP_AFTER=%s: want at least %s (%s), the longest an attempt can be in flight at the provider (PAYMENT_ATTEMPT_TIMEOUT %s, PAYMENT_ABANDONED_HOLD %s)",
			lookup, inFlightVar, inFlight, cfg.Resilience.AttemptTimeout, cfg.Resilience.AbandonedHold))
	}
	// A charge the provider worked on for that long appears in its list
	// that late after its creation time; the ledger walk's look-back must
	// reach back at least as far, or it could miss the charge for good.
	if late := cfg.Worker.Ledger.Late; late < inFlight {
		errs = append(errs, fmt.Errorf("LEDGER_RECONCILE_LATE=%s: want at least %s (%s), the longest an attempt can be in flight at the provider, after which its charge may first appear in the provider's list",
			late, inFlightVar, inFlight))
	}
	// A pending order younger than checkout's longest request may still
	// have its request running; sweeping it would charge it twice at once
	// (one provider key makes the second a replay, but a wasted call).
	if sweep, longest := cfg.Worker.Schedule.SweepAfter, checkout.LockTTL(); sweep <= longest {
		errs = append(errs, fmt.Errorf("SWEEP_AFTER=%s: want more than checkout's longest request, PAYMENT_BUDGET + 3 × DB_TX_TIMEOUT + 1s = %s (PAYMENT_BUDGET %s, DB_TX_TIMEOUT %s; set both as checkout's)",
			sweep, longest, checkout.PaymentBudget, checkout.DBTimeout))
	}
	// River rescues a job that has run this long; a job still running then
	// would run twice at once.
	if rescue := cfg.Worker.RescueStuckJobsAfter; rescue <= worker.ChargeJobTimeout {
		errs = append(errs, fmt.Errorf("RESCUE_STUCK_JOBS_AFTER=%s: want more than the charge job timeout (%s), or River rescues jobs still running", rescue, worker.ChargeJobTimeout))
	}
	// A client retries a request it got no answer for under the same
	// Idempotency-Key, which resumes the order the key names. Once the key
	// is pruned, the retry places a second order, with a provider key of
	// its own that the provider cannot match, while the worker may still
	// charge the first for as long as its charge window lasts: keys must be
	// kept at least that long.
	if keys, window := cfg.Worker.KeyRetention, order.ChargeWindow(cfg.Worker.Charge.KeyRetention); keys < window {
		errs = append(errs, fmt.Errorf("IDEMPOTENCY_KEY_RETENTION=%s: want at least the charge window, 90%% of PROVIDER_KEY_RETENTION (%s of %s): a retry after its key is pruned places a second order while the worker may still charge the first",
			keys, window, cfg.Worker.Charge.KeyRetention))
	}
	return errors.Join(errs...)
}
