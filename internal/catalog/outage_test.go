package catalog

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
)

// outage is a Service built by New, the wiring checkout uses, talking over
// real HTTP to the catalog simulator.
type outage struct {
	svc *Service
	sim *catalogsim.Simulator
	url string
	reg *prometheus.Registry
}

// setupOutage starts a simulator and a Service whose TTL is a nanosecond:
// every lookup asks the catalog, so an outage shows on the very next order
// without waiting for an entry to expire. Attempts time out after 100 ms.
func setupOutage(t *testing.T) *outage {
	t.Helper()
	sim := catalogsim.New(catalogsim.Config{})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)

	reg := prometheus.NewRegistry()
	rm, err := resilience.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.URL = srv.URL
	cfg.TTL = time.Nanosecond
	cfg.MaxStaleness = time.Hour
	cfg.Budget = 300 * time.Millisecond
	cfg.Resilience.AttemptTimeout = 100 * time.Millisecond
	cfg.Resilience.SlowCallThreshold = 80 * time.Millisecond
	svc, err := New(cfg, Options{Metrics: cm, Resilience: rm, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.CloseIdleConnections)
	return &outage{svc: svc, sim: sim, url: srv.URL, reg: reg}
}

func (o *outage) fault(t *testing.T, fault string) {
	t.Helper()
	resp, err := http.Post(o.url+"/admin/faults", "application/json", strings.NewReader(fault))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /admin/faults %s: status %d", fault, resp.StatusCode)
	}
}

// gauge reads resilience_breaker_state{name="catalog"}.
func (o *outage) breakerState(t *testing.T) resilience.State {
	t.Helper()
	families, err := o.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "resilience_breaker_state" {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m, "name", Name) {
				return resilience.State(m.GetGauge().GetValue())
			}
		}
	}
	t.Fatal(`resilience_breaker_state{name="catalog"} not exported`)
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestOutageThroughTheSimulator breaks the catalog simulator in each way
// it can break and checks, over real HTTP, what an order sees: the warm
// SKU keeps being checked from the stale cache, the breaker opens and then
// spares the catalog, and a SKU never seen gets a typed unavailable error
// with a Retry-After — never a panic or an untyped error.
func TestOutageThroughTheSimulator(t *testing.T) {
	t.Parallel()
	faults := []string{`{"down":true}`, `{"error_rate":1}`, `{"latency":"5s"}`}
	for _, fault := range faults {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			o := setupOutage(t)
			order := Order{Currency: "USD", Items: []Item{{SKU: "SKU-1", UnitPrice: 1299}}}
			if q, err := o.svc.Check(t.Context(), order); err != nil || q.Stale {
				t.Fatalf("healthy catalog: got %+v, %v; want a fresh match", q, err)
			}
			o.fault(t, fault)

			// The window of the last 10 calls holds the warm-up's success;
			// nine failed attempts trip it. Failing answers make two
			// attempts per order, so that is the fifth order; hung lookups
			// keep their slots once abandoned, and from the second order
			// on the limit refuses the one attempt it has — a failure too,
			// since the catalog is what holds the slots — so the eighth.
			for i := 1; o.breakerState(t) != resilience.StateOpen; i++ {
				if i > 8 {
					t.Fatalf("breaker still %v after %d orders", o.breakerState(t), i-1)
				}
				q, err := o.svc.Check(t.Context(), order)
				if err != nil || !q.Stale {
					t.Fatalf("order %d during the outage: got %+v, %v; want a stale match", i, q, err)
				}
			}

			requests := o.sim.Stats().Requests
			for i := range 10 {
				if q, err := o.svc.Check(t.Context(), order); err != nil || !q.Stale {
					t.Fatalf("order %d with the breaker open: got %+v, %v; want a stale match", i, q, err)
				}
			}
			if got := o.sim.Stats().Requests; got != requests {
				t.Errorf("catalog requests with the breaker open: got %d more, want none", got-requests)
			}

			cold := Order{Currency: "USD", Items: []Item{{SKU: "SKU-2", UnitPrice: 500}}}
			_, err := o.svc.Check(t.Context(), cold)
			var unavailable *UnavailableError
			if !errors.As(err, &unavailable) || !errors.Is(err, resilience.ErrOpen) {
				t.Fatalf("cold SKU: got %v, want an *UnavailableError wrapping ErrOpen", err)
			}
			// The catalog's hung lookups timed out, so the open state lasts
			// until they may be done: the abandoned-call hold after the last.
			if d, hold := unavailable.RetryAfter, resilience.DefaultConfig().AbandonedHold; d <= 0 || d > hold {
				t.Errorf("RetryAfter: got %v, want what is left of the open state (at most the %v hold)", d, hold)
			}
		})
	}
}

// TestColdStartOutage: a catalog down from the start leaves nothing to
// fall back on; every order gets the typed unavailable error.
func TestColdStartOutage(t *testing.T) {
	t.Parallel()
	o := setupOutage(t)
	o.fault(t, `{"down":true}`)
	order := Order{Currency: "USD", Items: []Item{{SKU: "SKU-1", UnitPrice: 1299}, {SKU: "SKU-2", UnitPrice: 500}}}
	for i := range 8 {
		_, err := o.svc.Check(t.Context(), order)
		var unavailable *UnavailableError
		if !errors.As(err, &unavailable) || len(unavailable.SKUs) != 2 || unavailable.RetryAfter <= 0 {
			t.Fatalf("order %d: got %v, want an *UnavailableError for both SKUs with a Retry-After", i, err)
		}
	}
}
