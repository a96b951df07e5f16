package main

import (
	"strings"
	"testing"
)

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
