package health_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/health"
)

func TestLiveness(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	health.Liveness().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
	if got, want := rec.Code, http.StatusOK; got != want {
		t.Errorf("status = %d, want %d", got, want)
	}
	if got, want := rec.Body.String(), `{"status":"ok"}`+"\n"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	ok := func(context.Context) error { return nil }
	down := func(context.Context) error { return errors.New("dial tcp 10.0.0.7:5432: refused") }
	hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

	tests := []struct {
		name   string
		checks map[string]health.Check
		want   int
	}{
		{name: "all ok", checks: map[string]health.Check{"database": ok}, want: http.StatusOK},
		{name: "database down", checks: map[string]health.Check{"database": down}, want: http.StatusServiceUnavailable},
		{name: "database hangs", checks: map[string]health.Check{"database": hang}, want: http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			health.Readiness(10*time.Millisecond, tt.checks).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready", nil))
			if rec.Code != tt.want {
				t.Errorf("status = %d, want %d", rec.Code, tt.want)
			}
			if strings.Contains(rec.Body.String(), "10.0.0.7") {
				t.Errorf("body %q leaks the dependency's error", rec.Body.String())
			}
		})
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	healthy := httptest.NewServer(health.Liveness())
	defer healthy.Close()
	if err := health.Probe(context.Background(), healthy.Listener.Addr().String()); err != nil {
		t.Errorf("Probe(healthy) = %v, want nil", err)
	}

	failing := httptest.NewServer(http.NotFoundHandler())
	defer failing.Close()
	if err := health.Probe(context.Background(), failing.Listener.Addr().String()); err == nil {
		t.Error("Probe(404) = nil, want error")
	}
	if err := health.Probe(context.Background(), "no-port"); err == nil {
		t.Error("Probe(bad address) = nil, want error")
	}
}
