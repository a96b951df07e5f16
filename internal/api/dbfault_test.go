package api_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestDatabaseOutage cuts checkout off its database (a proxy blackholes the
// connections; the shared PostgreSQL server keeps running for other tests)
// and holds it to DESIGN.md's numbers: 503 + Retry-After within 2 s,
// /ready 503, /health unaffected, and recovery without a restart.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	b, proxy := setup(t, options{proxy: true})
	if r := b.post(t, newKey(), validBody); r.status != http.StatusCreated {
		t.Fatalf("before the outage: %v, want 201", r)
	}

	proxy.Cut()
	key := newKey()
	start := time.Now()
	r := b.post(t, key, validBody)
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("503 took %v, want ≤ 2 s", elapsed)
	}
	if got, want := r.status, http.StatusServiceUnavailable; got != want {
		t.Fatalf("POST during the outage = %v, want %d", r, want)
	}
	decodeProblem(t, r)
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After = %q, want a positive number of seconds", r.header.Get("Retry-After"))
	}
	if r := b.do(t, http.MethodGet, "/orders/0190a6f5-8b5e-7c4e-9f00-000000000000", ""); r.status != http.StatusServiceUnavailable {
		t.Errorf("GET order during the outage = %v, want 503 (not 404: we cannot know)", r)
	}
	start = time.Now()
	if r := b.do(t, http.MethodGet, "/ready", ""); r.status != http.StatusServiceUnavailable {
		t.Errorf("/ready during the outage = %v, want 503", r)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("/ready took %v, want ≤ 2 s", elapsed)
	}
	start = time.Now()
	if r := b.do(t, http.MethodGet, "/health", ""); r.status != http.StatusOK {
		t.Errorf("/health during the outage = %v, want 200", r)
	}
	if elapsed := time.Since(start); elapsed > 100*time.Millisecond {
		t.Errorf("/health took %v during the outage, want milliseconds", elapsed)
	}

	proxy.Restore()
	// The 503 stored nothing, so the client's retry with the same key
	// proceeds once the pool has reconnected.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r = b.post(t, key, validBody)
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the pool's reconnection, not our own state
	}
	if got, want := r.status, http.StatusCreated; got != want {
		t.Fatalf("retry after the database came back = %v, want %d within 20 s", r, want)
	}
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("retry after a 503 was a replay; the 503 must not be stored")
	}
	if r := b.do(t, http.MethodGet, "/ready", ""); r.status != http.StatusOK {
		t.Errorf("/ready after recovery = %v, want 200", r)
	}
	if orders, keys := b.rows(t); orders != 2 || keys != 2 {
		t.Errorf("rows: %d orders, %d keys; want 2 and 2", orders, keys)
	}
}
