// Package simulatortest holds the tests both simulator binaries
// (cmd/paymentsim, cmd/catalogsim) run against their real wiring: /health
// and a clean shutdown, the healthcheck subcommand, the admin API's token,
// configuration errors that name the variable, and the rule that keeps the
// admin API off other interfaces without a token. Each binary's tests call
// them with its own name, variables and port.
package simulatortest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// HealthAndShutdown starts run with env, checks that /health answers 200
// {"status":"ok"} and that `<name> healthcheck` succeeds, stops it, and
// checks that it shut down cleanly and that the healthcheck then fails.
func HealthAndShutdown(t *testing.T, run process.RunFunc, name string, env map[string]string) {
	t.Helper()
	p := process.Start(t, run, []string{name}, env)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL+"/health", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	defer resp.Body.Close()
	var body struct{ Status string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("decode /health: %v", err)
	}
	if got, want := resp.StatusCode, http.StatusOK; got != want {
		t.Errorf("GET /health status: got %d, want %d", got, want)
	}
	if got, want := body.Status, "ok"; got != want {
		t.Errorf("GET /health status field: got %q, want %q", got, want)
	}

	host := strings.TrimPrefix(p.URL, "http://")
	healthcheck := func(k string) string { return map[string]string{"HTTP_ADDR": host}[k] }
	if err := run(t.Context(), []string{name, "healthcheck"}, healthcheck, io.Discard, io.Discard); err != nil {
		t.Errorf("healthcheck against a running server: %v", err)
	}

	if err := p.Stop(); err != nil {
		t.Errorf("graceful shutdown: got %v, want nil", err)
	}
	if err := run(t.Context(), []string{name, "healthcheck"}, healthcheck, io.Discard, io.Discard); err == nil {
		t.Error("healthcheck after shutdown: got nil, want an error")
	}
}

// AdminNeedsToken checks that GET /admin/stats of the simulator at url
// answers 401 without the bearer token and 200 with it.
func AdminNeedsToken(t *testing.T, url, token string) {
	t.Helper()
	stats, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/admin/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Status(t, stats), http.StatusUnauthorized; got != want {
		t.Errorf("GET /admin/stats without token: got %d, want %d", got, want)
	}
	stats.Header.Set("Authorization", "Bearer "+token)
	if got, want := Status(t, stats), http.StatusOK; got != want {
		t.Errorf("GET /admin/stats with token: got %d, want %d", got, want)
	}
}

// BadConfigurationNamesTheVariable checks that run refuses each bad
// setting, a variable and its value, with an error naming the variable.
func BadConfigurationNamesTheVariable(t *testing.T, run process.RunFunc, name string, bad [][2]string) {
	t.Helper()
	for _, setting := range bad {
		variable, value := setting[0], setting[1]
		t.Run(variable, func(t *testing.T) {
			t.Parallel()
			getenv := func(k string) string { return map[string]string{variable: value}[k] }
			err := run(t.Context(), []string{name}, getenv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), variable) {
				t.Errorf("run with %s=%q: got %v, want an error naming %s", variable, value, err, variable)
			}
		})
	}
}

// UnknownCommand checks that run refuses a subcommand it does not have.
func UnknownCommand(t *testing.T, run process.RunFunc, name string) {
	t.Helper()
	err := run(t.Context(), []string{name, "frobnicate"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("unknown command: got nil error")
	}
}

// AdminGuard checks that load serves the admin API on HTTP_ADDR beyond
// loopback only with tokenVar set or the explicit opt-out, and that the
// error names the listener, the token and the opt-out. port is the
// binary's default port (":8082").
func AdminGuard[C any](t *testing.T, load func(getenv func(string) string) (C, error), tokenVar, port string) {
	t.Helper()
	tests := []struct {
		name    string
		env     map[string]string
		wantErr []string // every string the error must contain; none: no error
	}{
		{name: "defaults: every interface, no token", env: nil,
			wantErr: []string{`HTTP_ADDR="` + port + `"`, tokenVar, "ALLOW_UNAUTHENTICATED_ADMIN=true"}},
		{name: "0.0.0.0 without a token", env: map[string]string{"HTTP_ADDR": "0.0.0.0" + port},
			wantErr: []string{"HTTP_ADDR", tokenVar}},
		{name: "with a token, as compose runs it", env: map[string]string{"HTTP_ADDR": port, tokenVar: "demo-admin-token"}},
		{name: "open by choice", env: map[string]string{"HTTP_ADDR": port, "ALLOW_UNAUTHENTICATED_ADMIN": "true"}},
		{name: "loopback, as make run and the tests run it", env: map[string]string{"HTTP_ADDR": "127.0.0.1:0"}},
		{name: "localhost", env: map[string]string{"HTTP_ADDR": "localhost" + port}},
		{name: "a bad opt-out", env: map[string]string{"ALLOW_UNAUTHENTICATED_ADMIN": "yes"},
			wantErr: []string{"ALLOW_UNAUTHENTICATED_ADMIN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(func(k string) string { return tt.env[k] })
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

// Status sends req and returns the answer's status code.
func Status(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
