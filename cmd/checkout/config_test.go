package main

import (
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/catalog"
)

// TestLoadConfigReadsTheCatalogBreaker: the catalog policy's breaker is set
// from CATALOG_BREAKER_*, apart from the payment's BREAKER_*.
func TestLoadConfigReadsTheCatalogBreaker(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"CATALOG_URL":                         "http://catalog:8083",
		"CATALOG_BREAKER_WINDOW":              "20",
		"CATALOG_BREAKER_MIN_CALLS":           "5",
		"CATALOG_BREAKER_FAILURE_RATE":        "0.25",
		"CATALOG_BREAKER_SLOW_CALL_THRESHOLD": "150ms",
		"CATALOG_BREAKER_SLOW_CALL_RATE":      "0.75",
		"CATALOG_BREAKER_OPEN_DURATION":       "2s",
		"CATALOG_BREAKER_OPEN_JITTER":         "50ms",
		"CATALOG_BREAKER_HALF_OPEN_PROBES":    "2",
	}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	got, want := cfg.Catalog.Resilience, catalog.DefaultConfig().Resilience
	want.WindowSize, want.MinCalls, want.FailureRate, want.SlowCallThreshold, want.SlowCallRate = 20, 5, 0.25, 150*time.Millisecond, 0.75
	want.OpenDuration, want.OpenJitter, want.HalfOpenProbes = 2*time.Second, 50*time.Millisecond, 2
	if got != want {
		t.Errorf("catalog policy:\n got %+v\nwant %+v", got, want)
	}
	if cfg.Resilience.WindowSize != 10 || cfg.Resilience.HalfOpenProbes != 3 {
		t.Errorf("payment breaker changed with the catalog's: %+v", cfg.Resilience)
	}

	for name, value := range map[string]string{
		"CATALOG_BREAKER_WINDOW": "0", "CATALOG_BREAKER_FAILURE_RATE": "2", "CATALOG_BREAKER_OPEN_DURATION": "soon",
	} {
		bad := map[string]string{"CATALOG_URL": "http://catalog:8083", name: value}
		if _, err := loadConfig(func(k string) string { return bad[k] }); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: got %v, want an error naming %s", name, value, err, name)
		}
	}
	// MinCalls above the window is valid alone per variable, not together.
	bad := map[string]string{"CATALOG_URL": "http://catalog:8083", "CATALOG_BREAKER_WINDOW": "5", "CATALOG_BREAKER_MIN_CALLS": "6"}
	if _, err := loadConfig(func(k string) string { return bad[k] }); err == nil || !strings.Contains(err.Error(), "CATALOG_") {
		t.Errorf("CATALOG_BREAKER_MIN_CALLS above CATALOG_BREAKER_WINDOW: got %v, want an error", err)
	}
}

// TestLoadConfigGuardsTheProfiles: Go's profiles have no credential, so
// DEBUG_ADDR beyond loopback needs the explicit opt-out.
func TestLoadConfigGuardsTheProfiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env     map[string]string
		wantErr bool
	}{
		{env: map[string]string{"DEBUG_ADDR": ":6060"}, wantErr: true},
		{env: map[string]string{"DEBUG_ADDR": "0.0.0.0:6060"}, wantErr: true},
		{env: map[string]string{"DEBUG_ADDR": "127.0.0.1:6060"}},
		{env: map[string]string{"DEBUG_ADDR": "localhost:6060"}},
		{env: map[string]string{"DEBUG_ADDR": ":6060", "ALLOW_UNAUTHENTICATED_DEBUG": "true"}},
	}
	for _, tt := range tests {
		_, err := loadConfig(func(k string) string { return tt.env[k] })
		switch {
		case tt.wantErr && (err == nil || !strings.Contains(err.Error(), "DEBUG_ADDR") || !strings.Contains(err.Error(), "ALLOW_UNAUTHENTICATED_DEBUG")):
			t.Errorf("loadConfig(%v): %v, want an error naming DEBUG_ADDR and ALLOW_UNAUTHENTICATED_DEBUG", tt.env, err)
		case !tt.wantErr && err != nil:
			t.Errorf("loadConfig(%v): %v, want no error", tt.env, err)
		}
	}
}
