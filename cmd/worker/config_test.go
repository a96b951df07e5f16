package main

import (
	"strings"
	"testing"
)

// TestLoadConfigRefusesSettingsThatOnlyHoldTogether: each pair of settings
// below is valid alone; a bad combination must fail at start, naming both
// variables, and the configurations the tests, the chaos soak, compose and
// the k8s manifests start must still pass.
func TestLoadConfigRefusesSettingsThatOnlyHoldTogether(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		wantErr []string // every string the error must contain; none: no error
	}{
		{name: "defaults", env: nil},
		{name: "the chaos soak's lowered settings", env: map[string]string{
			"CHARGE_GIVE_UP_AFTER": "3", "LOOKUP_AFTER": "15s", "RESCUE_STUCK_JOBS_AFTER": "31s",
		}},

		// LOOKUP_AFTER against the longest an attempt can be in flight.
		{name: "lookup at once", env: map[string]string{"LOOKUP_AFTER": "0s"},
			wantErr: []string{"LOOKUP_AFTER", "PAYMENT_ABANDONED_HOLD", "PAYMENT_ATTEMPT_TIMEOUT"}},
		{name: "lookup before the abandoned-call hold", env: map[string]string{"LOOKUP_AFTER": "9s", "PAYMENT_ABANDONED_HOLD": "10s"},
			wantErr: []string{"LOOKUP_AFTER=9s", "PAYMENT_ABANDONED_HOLD and the connect timeout (13s)"}},
		{name: "lookup at the hold, before a late connection's call", env: map[string]string{"LOOKUP_AFTER": "10s", "PAYMENT_ABANDONED_HOLD": "10s"},
			wantErr: []string{"LOOKUP_AFTER=10s", "PAYMENT_ABANDONED_HOLD and the connect timeout (13s)"}},
		{name: "lookup before the attempt timeout", env: map[string]string{"LOOKUP_AFTER": "5s", "PAYMENT_ABANDONED_HOLD": "0s", "PAYMENT_ATTEMPT_TIMEOUT": "6s"},
			wantErr: []string{"LOOKUP_AFTER=5s", "PAYMENT_ATTEMPT_TIMEOUT (6s)"}},
		{name: "lookup right after the hold and the connect timeout", env: map[string]string{"LOOKUP_AFTER": "13s", "PAYMENT_ABANDONED_HOLD": "10s"}},

		// SWEEP_AFTER against checkout's longest request (the key lock TTL).
		{name: "sweep at the key lock TTL", env: map[string]string{"SWEEP_AFTER": "7s"},
			wantErr: []string{"SWEEP_AFTER=7s", "PAYMENT_BUDGET", "DB_TX_TIMEOUT", "= 7s"}},
		{name: "checkout's budget raised past the sweep", env: map[string]string{"PAYMENT_BUDGET": "5s"},
			wantErr: []string{"SWEEP_AFTER=10s", "PAYMENT_BUDGET 5s", "DB_TX_TIMEOUT 1.5s"}},
		{name: "checkout's transaction timeout raised past the sweep", env: map[string]string{"DB_TX_TIMEOUT": "3s"},
			wantErr: []string{"SWEEP_AFTER=10s", "DB_TX_TIMEOUT 3s"}},
		{name: "sweep raised with checkout's timeouts", env: map[string]string{"PAYMENT_BUDGET": "5s", "DB_TX_TIMEOUT": "3s", "SWEEP_AFTER": "16s"}},

		// RESCUE_STUCK_JOBS_AFTER against the job timeout.
		{name: "rescue at the job timeout", env: map[string]string{"RESCUE_STUCK_JOBS_AFTER": "30s"},
			wantErr: []string{"RESCUE_STUCK_JOBS_AFTER=30s", "charge job timeout (30s)"}},

		// IDEMPOTENCY_KEY_RETENTION against the charge window of PROVIDER_KEY_RETENTION.
		{name: "keys pruned inside the charge window", env: map[string]string{"PROVIDER_KEY_RETENTION": "48h"},
			wantErr: []string{"IDEMPOTENCY_KEY_RETENTION=24h", "PROVIDER_KEY_RETENTION (43h12m0s of 48h0m0s)"}},
		{name: "keys kept for the charge window", env: map[string]string{"PROVIDER_KEY_RETENTION": "26h"}},
		{name: "a long provider retention with keys kept as long", env: map[string]string{"PROVIDER_KEY_RETENTION": "2400h", "IDEMPOTENCY_KEY_RETENTION": "2400h"}},

		// River UI moves jobs: no credential, no listener beyond loopback.
		{name: "River UI open on every interface", env: map[string]string{"HTTP_ADDR": ":8081"},
			wantErr: []string{`HTTP_ADDR=":8081"`, "RIVERUI_USER and RIVERUI_PASSWORD", "ALLOW_UNAUTHENTICATED_RIVERUI=true"}},
		{name: "River UI open on 0.0.0.0", env: map[string]string{"HTTP_ADDR": "0.0.0.0:8081"},
			wantErr: []string{"HTTP_ADDR", "RIVERUI_USER"}},
		{name: "River UI open on a host name", env: map[string]string{"HTTP_ADDR": "worker.internal:8081"},
			wantErr: []string{"HTTP_ADDR", "RIVERUI_USER"}},
		{name: "River UI with credentials, as compose and k8s run it", env: map[string]string{
			"HTTP_ADDR": ":8081", "RIVERUI_USER": "admin", "RIVERUI_PASSWORD": "demo-riverui-password",
		}},
		{name: "River UI open by choice", env: map[string]string{"HTTP_ADDR": ":8081", "ALLOW_UNAUTHENTICATED_RIVERUI": "true"}},
		{name: "River UI on localhost", env: map[string]string{"HTTP_ADDR": "localhost:8081"}},
		{name: "River UI on ::1", env: map[string]string{"HTTP_ADDR": "[::1]:8081"}},

		// Go's profiles have no credential at all.
		{name: "profiles on every interface", env: map[string]string{"DEBUG_ADDR": ":6060"},
			wantErr: []string{`DEBUG_ADDR=":6060"`, "ALLOW_UNAUTHENTICATED_DEBUG=true"}},
		{name: "profiles on loopback", env: map[string]string{"DEBUG_ADDR": "127.0.0.1:6060"}},
		{name: "profiles open by choice", env: map[string]string{"DEBUG_ADDR": ":6060", "ALLOW_UNAUTHENTICATED_DEBUG": "true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"HTTP_ADDR": "127.0.0.1:8081"}
			for k, v := range tt.env {
				env[k] = v
			}
			_, err := loadConfig(func(k string) string { return env[k] })
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
