package main

import (
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/sim/simulator/simulatortest"
)

// TestLoadConfigGuardsTheAdminAPI: the admin API is served on HTTP_ADDR
// beyond loopback only with PAYMENTSIM_ADMIN_TOKEN or the explicit opt-out; the
// error names the listener, the token and the opt-out.
func TestLoadConfigGuardsTheAdminAPI(t *testing.T) {
	t.Parallel()
	simulatortest.AdminGuard(t, loadConfig, "PAYMENTSIM_ADMIN_TOKEN", ":8082")
}

func TestLoadConfigGuardsTheProfiles(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DEBUG_ADDR": ":6060"}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "DEBUG_ADDR") || !strings.Contains(err.Error(), "ALLOW_UNAUTHENTICATED_DEBUG") {
		t.Errorf("DEBUG_ADDR=:6060: got %v, want an error naming DEBUG_ADDR and ALLOW_UNAUTHENTICATED_DEBUG", err)
	}
}
