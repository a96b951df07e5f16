package main

import (
	"testing"

	"github.com/resilientcheckout/checkout/internal/sim/simulator/simulatortest"
)

// TestLoadConfigGuardsTheAdminAPI: the admin API is served on HTTP_ADDR
// beyond loopback only with CATALOGSIM_ADMIN_TOKEN or the explicit opt-out; the
// error names the listener, the token and the opt-out.
func TestLoadConfigGuardsTheAdminAPI(t *testing.T) {
	t.Parallel()
	simulatortest.AdminGuard(t, loadConfig, "CATALOGSIM_ADMIN_TOKEN", ":8083")
}
