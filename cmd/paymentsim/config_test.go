package main

import (
	"strings"
	"testing"
)

// TestLoadConfigGuardsTheAdminAPI: the admin API is served on HTTP_ADDR
// beyond loopback only with PAYMENTSIM_ADMIN_TOKEN or the explicit opt-out; the
// error names the listener, the token and the opt-out.
func TestLoadConfigGuardsTheAdminAPI(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		wantErr []string // every string the error must contain; none: no error
	}{
		{name: "defaults: every interface, no token", env: nil,
			wantErr: []string{`HTTP_ADDR=":8082"`, "PAYMENTSIM_ADMIN_TOKEN", "ALLOW_UNAUTHENTICATED_ADMIN=true"}},
		{name: "0.0.0.0 without a token", env: map[string]string{"HTTP_ADDR": "0.0.0.0:8082"},
			wantErr: []string{"HTTP_ADDR", "PAYMENTSIM_ADMIN_TOKEN"}},
		{name: "with a token, as compose runs it", env: map[string]string{"HTTP_ADDR": ":8082", "PAYMENTSIM_ADMIN_TOKEN": "demo-admin-token"}},
		{name: "open by choice", env: map[string]string{"HTTP_ADDR": ":8082", "ALLOW_UNAUTHENTICATED_ADMIN": "true"}},
		{name: "loopback, as make run and the tests run it", env: map[string]string{"HTTP_ADDR": "127.0.0.1:0"}},
		{name: "localhost", env: map[string]string{"HTTP_ADDR": "localhost:8082"}},
		{name: "a bad opt-out", env: map[string]string{"ALLOW_UNAUTHENTICATED_ADMIN": "yes"},
			wantErr: []string{"ALLOW_UNAUTHENTICATED_ADMIN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := loadConfig(func(k string) string { return tt.env[k] })
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("loadConfig(%v): %v, want no error", tt.env, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("loadConfig(%v): no error, want one naming %q", tt.env, tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("loadConfig(%v): %v, want it to contain %q", tt.env, err, want)
				}
			}
		})
	}
}

func TestLoadConfigGuardsTheProfiles(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DEBUG_ADDR": ":6060"}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "DEBUG_ADDR") || !strings.Contains(err.Error(), "ALLOW_UNAUTHENTICATED_DEBUG") {
		t.Errorf("DEBUG_ADDR=:6060: got %v, want an error naming DEBUG_ADDR and ALLOW_UNAUTHENTICATED_DEBUG", err)
	}
}
