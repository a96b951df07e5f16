package main

import (
	"strings"
	"testing"
)

// TestLoadConfigGuardsTheAdminAPI: the admin API is served on HTTP_ADDR
// beyond loopback only with CATALOGSIM_ADMIN_TOKEN or the explicit opt-out; the
// error names the listener, the token and the opt-out.
func TestLoadConfigGuardsTheAdminAPI(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		wantErr []string // every string the error must contain; none: no error
	}{
		{name: "defaults: every interface, no token", env: nil,
			wantErr: []string{`HTTP_ADDR=":8083"`, "CATALOGSIM_ADMIN_TOKEN", "ALLOW_UNAUTHENTICATED_ADMIN=true"}},
		{name: "0.0.0.0 without a token", env: map[string]string{"HTTP_ADDR": "0.0.0.0:8083"},
			wantErr: []string{"HTTP_ADDR", "CATALOGSIM_ADMIN_TOKEN"}},
		{name: "with a token, as compose runs it", env: map[string]string{"HTTP_ADDR": ":8083", "CATALOGSIM_ADMIN_TOKEN": "demo-admin-token"}},
		{name: "open by choice", env: map[string]string{"HTTP_ADDR": ":8083", "ALLOW_UNAUTHENTICATED_ADMIN": "true"}},
		{name: "loopback, as make run and the tests run it", env: map[string]string{"HTTP_ADDR": "127.0.0.1:0"}},
		{name: "localhost", env: map[string]string{"HTTP_ADDR": "localhost:8083"}},
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
