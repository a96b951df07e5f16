package main

import (
	"fmt"
	"time"

	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim"
	"github.com/resilientcheckout/checkout/internal/sim/simulator"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// config is every setting of the paymentsim binary, read from the environment in one place.
// docs/operations.md lists each variable; a test keeps the two in sync.
type config struct {
	simulator.Config
	LedgerCap    int
	KeyRetention time.Duration
	SearchLag    time.Duration
	ChargeCap    int           // 0: paymentsim's default, a multiple of LedgerCap
	Capacity     int           // 0: unlimited
	LatencySigma float64       // 0: Latency ± Jitter; above: log-normal around Latency
	LatencyCap   time.Duration // 0: none
	RateLimit    int           // charges a second; 0: unlimited
}

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		Config: simulator.Config{
			HTTPAddr:        env.Addr("HTTP_ADDR", ":8082"),
			LogLevel:        env.OneOf("LOG_LEVEL", "info", telemetry.Levels...),
			DebugAddr:       env.DebugAddr(),
			ShutdownTimeout: env.Duration("SHUTDOWN_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute),
			Latency:         env.Duration("PAYMENTSIM_LATENCY", paymentsim.DefaultLatency, 0, time.Minute),
			Jitter:          env.Duration("PAYMENTSIM_JITTER", paymentsim.DefaultJitter, 0, time.Minute),
			AdminToken:      env.String("PAYMENTSIM_ADMIN_TOKEN", ""),
		},
		LedgerCap:    env.Int("PAYMENTSIM_LEDGER_CAP", paymentsim.DefaultLedgerCap, 1, 10_000_000),
		ChargeCap:    env.Int("PAYMENTSIM_CHARGE_CAP", 0, 1, 100_000_000),
		KeyRetention: env.Duration("PAYMENTSIM_KEY_RETENTION", paymentsim.DefaultKeyRetention, time.Second, 365*24*time.Hour),
		SearchLag:    env.Duration("PAYMENTSIM_SEARCH_LAG", paymentsim.DefaultSearchLag, 0, 24*time.Hour),
		Capacity:     env.Int("PAYMENTSIM_CAPACITY", paymentsim.DefaultCapacity, 0, 1_000_000),
		LatencySigma: env.Float("PAYMENTSIM_LATENCY_SIGMA", 0, 0, paymentsim.MaxLatencySigma),
		LatencyCap:   env.Duration("PAYMENTSIM_LATENCY_CAP", 0, 0, time.Minute),
		RateLimit:    env.Int("PAYMENTSIM_RATE_LIMIT", 0, 0, 1_000_000),
	}
	// The admin API resets the ledger (forgetting keys, so a retry becomes
	// a second charge) and injects faults: open only on loopback, with a
	// token, or when the operator opts out.
	admin := envconfig.Guarded{
		Surface: "the admin API", AddrVar: "HTTP_ADDR", Addr: cfg.HTTPAddr,
		Credential: "PAYMENTSIM_ADMIN_TOKEN", Protected: cfg.AdminToken != "",
		OptOut: "ALLOW_UNAUTHENTICATED_ADMIN", Allowed: env.OneOf("ALLOW_UNAUTHENTICATED_ADMIN", "false", "true", "false") == "true",
	}
	if err := env.Err(); err != nil {
		return cfg, err
	}
	// A record of PaymentIntents smaller than the key cache would forget intents whose keys
	// the provider still replays, and the list would contradict the replay.
	if cfg.ChargeCap != 0 && cfg.ChargeCap < cfg.LedgerCap {
		return cfg, fmt.Errorf("PAYMENTSIM_CHARGE_CAP=%d: want at least PAYMENTSIM_LEDGER_CAP (%d)", cfg.ChargeCap, cfg.LedgerCap)
	}
	// The cap truncates the log-normal's upper half, so it needs one, above its median.
	if cfg.LatencyCap != 0 && (cfg.LatencySigma == 0 || cfg.LatencyCap <= cfg.Latency) {
		return cfg, fmt.Errorf("PAYMENTSIM_LATENCY_CAP=%v: want a cap above PAYMENTSIM_LATENCY (%v), with PAYMENTSIM_LATENCY_SIGMA above 0", cfg.LatencyCap, cfg.Latency)
	}
	return cfg, admin.Check()
}
