package main

import (
	"time"

	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/paymentsim"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// config is every setting of the paymentsim binary, read from the environment in one place.
// README.md lists each variable; keep the two in sync.
type config struct {
	HTTPAddr        string
	LogLevel        string
	ShutdownTimeout time.Duration
	Latency         time.Duration
	Jitter          time.Duration
	LedgerCap       int
	AdminToken      string
}

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		HTTPAddr:        env.Addr("HTTP_ADDR", ":8082"),
		LogLevel:        env.OneOf("LOG_LEVEL", "info", telemetry.Levels...),
		ShutdownTimeout: env.Duration("SHUTDOWN_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute),
		Latency:         env.Duration("PAYMENTSIM_LATENCY", paymentsim.DefaultLatency, 0, time.Minute),
		Jitter:          env.Duration("PAYMENTSIM_JITTER", paymentsim.DefaultJitter, 0, time.Minute),
		LedgerCap:       env.Int("PAYMENTSIM_LEDGER_CAP", paymentsim.DefaultLedgerCap, 1, 10_000_000),
		AdminToken:      env.String("PAYMENTSIM_ADMIN_TOKEN", ""),
	}
	return cfg, env.Err()
}
