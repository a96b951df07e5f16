package main

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/resilientcheckout/checkout/internal/api"
	"github.com/resilientcheckout/checkout/internal/auth"
	"github.com/resilientcheckout/checkout/internal/catalog"
	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/httpserver"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/payment"
	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// config is every setting of the checkout binary, read from the environment
// in one place. docs/operations.md lists each variable; a test keeps the two in sync.
type config struct {
	HTTPAddr        string
	LogLevel        string
	DebugAddr       string
	MetricsAddr     string // empty: /metrics on HTTPAddr
	ShutdownTimeout time.Duration
	DrainDelay      time.Duration
	Database        database.Config
	MigrateWait     time.Duration // how long `checkout migrate` waits for the database
	Tracing         telemetry.TracingConfig
	Payment         payment.Config
	// PaymentErr is what is wrong with the provider's key, if anything: serve refuses to
	// start with it; commands that do not call the provider run.
	PaymentErr     error
	Resilience     resilience.Config
	FleetBreaker   bool // share the payment breaker with every process (internal/fleet)
	FleetListenURL string
	APIPool        httpserver.PoolConfig
	HealthPool     httpserver.PoolConfig
	Orders         order.Config
	Catalog        catalog.Config // URL empty: no price check
	Auth           auth.Config    // Issuer empty: authentication off
	RateLimit      api.RateLimit  // Requests 0: no limit
}

// defaultRateLimit is each client's quota per minute: 100 requests a second
// sustained. A customer placing an order and polling it every second sends
// about 70 a minute; the experiment's load generator, one address at up to
// 80 orders a second, stays under it without authentication; a NAT
// gateway's customers share one address. Only a client in a loop meets it.
const defaultRateLimit = 6000

func resilienceDefaults(mode resilience.Mode) resilience.Config {
	d := resilience.DefaultConfig()
	d.Mode = mode
	return d
}

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	apiPool, healthPool := httpserver.DefaultAPIPool(), httpserver.DefaultHealthPool()
	orders := order.DefaultConfig()
	cfg := config{
		HTTPAddr:        env.Addr("HTTP_ADDR", ":8080"),
		LogLevel:        env.OneOf("LOG_LEVEL", "info", telemetry.Levels...),
		DebugAddr:       env.DebugAddr(),
		MetricsAddr:     env.OptionalAddr("METRICS_ADDR"),
		ShutdownTimeout: env.Duration("SHUTDOWN_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute),
		DrainDelay:      env.Duration("SHUTDOWN_DRAIN_DELAY", httpserver.DefaultDrainDelay, 0, 5*time.Minute),
		Database:        env.Database(database.Config{MaxConns: 20, ConnectTimeout: time.Second, StatementTimeout: 2 * time.Second}),
		MigrateWait:     env.Duration("MIGRATE_WAIT", 30*time.Second, 0, 10*time.Minute),
		Tracing:         env.Tracing("checkout"),
		FleetBreaker:    env.OneOf("FLEET_BREAKER", "on", "on", "off") == "on",
		FleetListenURL:  env.OptionalURL("FLEET_LISTEN_DATABASE_URL", "postgres", "postgresql"),
		Resilience:      env.Resilience(resilienceDefaults(env.Mode())),
		APIPool: httpserver.PoolConfig{
			Size:    env.Int("API_POOL_SIZE", apiPool.Size, 1, 10_000),
			MaxWait: env.Duration("API_POOL_WAIT", apiPool.MaxWait, 0, time.Minute),
		},
		HealthPool: httpserver.PoolConfig{
			Size:    env.Int("HEALTH_POOL_SIZE", healthPool.Size, 1, 1000),
			MaxWait: env.Duration("HEALTH_POOL_WAIT", healthPool.MaxWait, 0, time.Minute),
		},
		Orders: order.Config{
			PaymentBudget: env.PaymentBudget(orders.PaymentBudget),
			DBTimeout:     env.TxTimeout(orders.DBTimeout),
			KeyRetention:  env.Duration("PROVIDER_KEY_RETENTION", orders.KeyRetention, time.Second, 365*24*time.Hour),
			AsyncSettle:   env.OneOf("SETTLE_ASYNC_COMMIT", "true", "true", "false") == "true",
		},
	}
	cat := catalog.DefaultConfig()
	cfg.Catalog = catalog.Config{
		URL:          env.OptionalURL("CATALOG_URL", "http", "https"),
		TTL:          env.Duration("CATALOG_TTL", cat.TTL, time.Second, 24*time.Hour),
		MaxStaleness: env.Duration("CATALOG_MAX_STALENESS", cat.MaxStaleness, 0, 7*24*time.Hour),
		CacheSize:    cat.CacheSize,
		Budget:       cat.Budget,
		Resilience:   env.CatalogBreaker(cat.Resilience),
	}
	// The catalog's policy follows the mode, as the payment's does.
	cfg.Catalog.Resilience.Mode = cfg.Resilience.Mode
	// Without protection there is no fallback, and in mode none no deadline
	// on the charge either: the experiment compares.
	cfg.Orders.Fallback = cfg.Resilience.Mode == resilience.ModeProtected
	if cfg.Resilience.Mode == resilience.ModeNone {
		cfg.Orders.PaymentBudget = 0
	}
	authDefaults := auth.DefaultConfig()
	cfg.Auth = auth.Config{
		Issuer:        env.OptionalURL("AUTH_ISSUER", "http", "https"),
		Audience:      env.String("AUTH_AUDIENCE", ""),
		CustomerClaim: env.String("AUTH_CUSTOMER_CLAIM", authDefaults.CustomerClaim),
		Refresh:       env.Duration("AUTH_KEYS_REFRESH", authDefaults.Refresh, time.Second, 24*time.Hour),
		MinRefetch:    authDefaults.MinRefetch,
		Resilience:    authDefaults.Resilience,
	}
	cfg.Auth.MinRefetch = min(cfg.Auth.MinRefetch, cfg.Auth.Refresh)
	cfg.RateLimit = api.RateLimit{
		Requests: env.Int("RATE_LIMIT", defaultRateLimit, 0, 10_000_000),
		Window:   env.Duration("RATE_LIMIT_WINDOW", time.Minute, time.Second, time.Hour),
	}
	proxies, proxiesErr := parsePrefixes(env.String("TRUSTED_PROXIES", ""))
	cfg.RateLimit.TrustedProxies = proxies
	cfg.Payment, cfg.PaymentErr = env.Payment()
	if err := env.Err(); err != nil {
		return cfg, err
	}
	if proxiesErr != nil {
		return cfg, fmt.Errorf("TRUSTED_PROXIES: %w", proxiesErr)
	}
	if cfg.Auth.Issuer != "" {
		if cfg.Auth.Audience == "" {
			return cfg, fmt.Errorf("AUTH_AUDIENCE must be set with AUTH_ISSUER")
		}
		if err := cfg.Auth.Validate(); err != nil {
			return cfg, fmt.Errorf("AUTH_* settings: %w", err)
		}
	}
	if err := cfg.Resilience.Validate(); err != nil {
		return cfg, fmt.Errorf("PAYMENT_*/BREAKER_* settings: %w", err)
	}
	if cfg.Catalog.URL != "" {
		if err := cfg.Catalog.Validate(); err != nil {
			return cfg, fmt.Errorf("CATALOG_* settings: %w", err)
		}
	}
	return cfg, nil
}

// parsePrefixes parses a comma-separated list of CIDR prefixes; a bare
// address is its own /32 or /128.
func parsePrefixes(list string) ([]netip.Prefix, error) {
	var prefixes []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q: want a CIDR prefix such as 10.0.0.0/8", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		prefixes = append(prefixes, p.Masked())
	}
	return prefixes, nil
}
