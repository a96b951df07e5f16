package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/idempotency"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/telemetry"
	"github.com/resilientcheckout/checkout/internal/worker"
)

// config is every setting of the worker binary, read from the environment
// in one place. README.md lists each variable; a test keeps the two in sync.
type config struct {
	HTTPAddr        string
	LogLevel        string
	DebugAddr       string
	ShutdownTimeout time.Duration
	DrainDelay      time.Duration
	Database        database.Config
	Tracing         telemetry.TracingConfig
	PaymentURL      string
	Resilience      resilience.Config
	FleetBreaker    bool // share the payment breaker with every process (internal/fleet)
	FleetListenURL  string
	Worker          worker.Config
	RiverUIUser     string
	RiverUIPassword string
}

// workerResilienceDefaults adjusts DESIGN.md's defaults for a background
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
	return d
}

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	charge, schedule := worker.DefaultChargePolicy(), worker.DefaultSchedule()
	shutdownTimeout := env.Duration("SHUTDOWN_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute)
	// The worker is always protected (see workerResilienceDefaults); a
	// value meant for checkout's experiment must not pass silently here.
	env.OneOf("RESILIENCE_MODE", "protected", "protected")
	cfg := config{
		HTTPAddr:        env.Addr("HTTP_ADDR", ":8081"),
		LogLevel:        env.OneOf("LOG_LEVEL", "info", telemetry.Levels...),
		DebugAddr:       env.OptionalAddr("DEBUG_ADDR"),
		ShutdownTimeout: shutdownTimeout,
		DrainDelay:      env.Duration("SHUTDOWN_DRAIN_DELAY", httpserver.DefaultDrainDelay, 0, 5*time.Minute),
		Database:        env.Database(database.Config{MaxConns: 10, ConnectTimeout: 2 * time.Second, StatementTimeout: 5 * time.Second}),
		Tracing:         env.Tracing("worker"),
		PaymentURL:      env.URL("PAYMENT_URL", "http://localhost:8082", "http", "https"),
		FleetBreaker:    env.OneOf("FLEET_BREAKER", "on", "on", "off") == "on",
		FleetListenURL:  env.OptionalURL("FLEET_LISTEN_DATABASE_URL", "postgres", "postgresql"),
		Resilience:      env.Resilience(workerResilienceDefaults()),
		Worker: worker.Config{
			Concurrency: env.Int("WORKER_CONCURRENCY", 4, 1, 1000),
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
			// Must exceed the job timeout: River rescues a job only once it
			// has run this long, so a worker killed mid-charge has its job
			// retried.
			RescueStuckJobsAfter: env.Duration("RESCUE_STUCK_JOBS_AFTER", time.Minute, worker.ChargeJobTimeout+time.Second, time.Hour),
			KeyRetention:         env.Duration("IDEMPOTENCY_KEY_RETENTION", idempotency.MinRetention, idempotency.MinRetention, 30*24*time.Hour),
			PruneInterval:        env.Duration("IDEMPOTENCY_PRUNE_INTERVAL", time.Hour, time.Second, 24*time.Hour),
			ShutdownTimeout:      shutdownTimeout,
			// true behind a pooler in transaction mode, where LISTEN cannot
			// work (README.md "PgBouncer").
			PollOnly: env.OneOf("RIVER_POLL_ONLY", "false", "true", "false") == "true",
		},
		RiverUIUser:     env.String("RIVERUI_USER", ""),
		RiverUIPassword: env.String("RIVERUI_PASSWORD", ""),
	}
	// River retries failed jobs on its own schedule (order.ChargeWorker's
	// NextRetry); retrying inside a job as well would multiply attempts.
	cfg.Resilience.MaxAttempts = 1
	if err := env.Err(); err != nil {
		return cfg, err
	}
	if (cfg.RiverUIUser == "") != (cfg.RiverUIPassword == "") {
		return cfg, errors.New("RIVERUI_USER and RIVERUI_PASSWORD must be set together")
	}
	if err := cfg.Resilience.Validate(); err != nil {
		return cfg, fmt.Errorf("PAYMENT_*/BREAKER_* settings: %w", err)
	}
	return cfg, nil
}
