package main

import (
	"time"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// config is every setting of the worker binary, read from the environment
// in one place. README.md lists each variable; keep the two in sync.
type config struct {
	HTTPAddr        string
	LogLevel        string
	ShutdownTimeout time.Duration
	Database        database.Config
	PaymentURL      string
}

const defaultDatabaseURL = "postgres://checkout:checkout@localhost:5432/checkout?sslmode=disable"

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		HTTPAddr:        env.Addr("HTTP_ADDR", ":8081"),
		LogLevel:        env.OneOf("LOG_LEVEL", "info", telemetry.Levels...),
		ShutdownTimeout: env.Duration("SHUTDOWN_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute),
		Database: database.Config{
			URL:              env.URL("DATABASE_URL", defaultDatabaseURL, "postgres", "postgresql"),
			MaxConns:         int32(env.Int("DB_MAX_CONNS", 10, 1, 1000)),
			ConnectTimeout:   env.Duration("DB_CONNECT_TIMEOUT", 2*time.Second, 100*time.Millisecond, time.Minute),
			StatementTimeout: env.Duration("DB_STATEMENT_TIMEOUT", 5*time.Second, 100*time.Millisecond, time.Minute),
		},
		PaymentURL: env.URL("PAYMENT_URL", "http://localhost:8082", "http", "https"),
	}
	return cfg, env.Err()
}
