package main

import (
	"time"

	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
	"github.com/resilientcheckout/checkout/internal/sim/simulator"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// config is every setting of the catalogsim binary, read from the
// environment in one place. docs/operations.md lists each variable; a test
// keeps the two in sync.
type config struct {
	simulator.Config // DebugAddr stays empty: catalogsim has no debug listener
}

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{simulator.Config{
		HTTPAddr:        env.Addr("HTTP_ADDR", ":8083"),
		LogLevel:        env.OneOf("LOG_LEVEL", "info", telemetry.Levels...),
		ShutdownTimeout: env.Duration("SHUTDOWN_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute),
		Latency:         env.Duration("CATALOGSIM_LATENCY", catalogsim.DefaultLatency, 0, time.Minute),
		Jitter:          env.Duration("CATALOGSIM_JITTER", catalogsim.DefaultJitter, 0, time.Minute),
		AdminToken:      env.String("CATALOGSIM_ADMIN_TOKEN", ""),
	}}
	// The admin API sets the prices checkout charges: open only on
	// loopback, with a token, or when the operator opts out.
	admin := envconfig.Guarded{
		Surface: "the admin API", AddrVar: "HTTP_ADDR", Addr: cfg.HTTPAddr,
		Credential: "CATALOGSIM_ADMIN_TOKEN", Protected: cfg.AdminToken != "",
		OptOut: "ALLOW_UNAUTHENTICATED_ADMIN", Allowed: env.OneOf("ALLOW_UNAUTHENTICATED_ADMIN", "false", "true", "false") == "true",
	}
	if err := env.Err(); err != nil {
		return cfg, err
	}
	return cfg, admin.Check()
}
