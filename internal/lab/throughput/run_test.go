package throughput

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestCheckoutEnvTurnsTheRateLimitOff: wrk's load comes from one address,
// so checkout runs without its per-address limit unless the run says
// otherwise, and the run's own setting is the one the process sees.
func TestCheckoutEnvTurnsTheRateLimitOff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		extra []string
		want  string
	}{
		{name: "default", want: "RATE_LIMIT=0"},
		{name: "the run's own limit", extra: []string{"RATE_LIMIT=100000"}, want: "RATE_LIMIT=100000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("env")
			cmd.Env = checkoutEnv("DATABASE_URL=postgres://x/y", "STRIPE_API_BASE=http://127.0.0.1:1", tt.extra)
			got := slices.DeleteFunc(cmd.Environ(), func(kv string) bool { return !strings.HasPrefix(kv, "RATE_LIMIT=") })
			if !slices.Equal(got, []string{tt.want}) {
				t.Errorf("checkout's environment has %q, want [%s]", got, tt.want)
			}
		})
	}
}
