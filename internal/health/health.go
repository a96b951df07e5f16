// Package health serves the probes an orchestrator uses to decide whether to
// restart a process (liveness) or send it traffic (readiness).
//
// Liveness touches no dependency: a slow payment provider or a dead database
// must never get a healthy process restarted, which would turn a partial
// outage into a full one. Readiness reflects only what this process needs to
// accept work durably (the database), never the payment provider, whose
// outages the service is built to absorb. A process that has been asked to
// stop answers readiness with ShuttingDown while it drains.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Check reports whether one dependency is usable. Implementations must
// honour ctx: the readiness handler bounds every check with a timeout.
type Check func(ctx context.Context) error

var (
	okBody           = []byte(`{"status":"ok"}` + "\n")
	shuttingDownBody = []byte(`{"status":"shutting_down"}` + "\n")
)

// Liveness answers 200 {"status":"ok"} without looking at anything else.
func Liveness() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(okBody)
	})
}

// Readiness runs every named check with the given timeout and answers 200
// when all pass, 503 otherwise. The body names failing checks but not their
// errors, which can carry internal addresses.
func Readiness(timeout time.Duration, checks map[string]Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		status, code := "ok", http.StatusOK
		result := make(map[string]string, len(checks))
		for name, check := range checks {
			result[name] = "ok"
			if err := check(ctx); err != nil {
				result[name] = "unavailable"
				status, code = "unavailable", http.StatusServiceUnavailable
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "checks": result})
	})
}

// ShuttingDown answers 503 {"status":"shutting_down"}: the readiness of a
// process that has been asked to stop and is draining, so that load
// balancers stop sending it new requests while it finishes the ones it has
// (see httpserver.Config.DrainDelay).
func ShuttingDown() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(shuttingDownBody)
	})
}

// Probe performs the container healthcheck: GET /health on the process's
// own listen address. The distroless runtime image has no curl, so each
// server binary exposes this as its `healthcheck` subcommand.
func Probe(ctx context.Context, listenAddr string) error {
	host, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return fmt.Errorf("healthcheck: listen address %q: %w", listenAddr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(host, port) + "/health"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New("healthcheck: " + url + " answered " + resp.Status)
	}
	return nil
}
