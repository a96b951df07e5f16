package envconfig_test

import (
	"testing"

	"github.com/resilientcheckout/checkout/internal/envconfig"
)

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:8080": true, "localhost:8080": true, "[::1]:8080": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.5:8080": false,
		"worker.internal:8080": false, "localhost.example.com:8080": false, "8080": false, "": false,
	} {
		if got := envconfig.Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
