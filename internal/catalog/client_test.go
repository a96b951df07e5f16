package catalog

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/resilience"
	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
)

// TestClientAgainstSimulator speaks the protocol over real HTTP to the
// simulator the demo runs, with a SKU that needs escaping.
func TestClientAgainstSimulator(t *testing.T) {
	t.Parallel()
	sim := catalogsim.New(catalogsim.Config{Prices: map[string]catalogsim.Price{
		"SKU-1":          {UnitPrice: 1299, Currency: "USD"},
		"Tee shirt/L&XL": {UnitPrice: 900, Currency: "EUR"},
	}})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	c, err := newClient(srv.URL, 4)
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.prices(t.Context(), []string{"SKU-1", "SKU-404", "Tee shirt/L&XL"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Price{"SKU-1": {1299, "USD"}, "Tee shirt/L&XL": {900, "EUR"}}
	if fmt.Sprint(q.Prices) != fmt.Sprint(want) || fmt.Sprint(q.Unknown) != "[SKU-404]" || q.Stale {
		t.Errorf("got %+v, want prices %v and SKU-404 unknown", q, want)
	}
}

// TestClientClassifiesAnswers: what the catalog gets wrong is its trouble
// (transient: a breaker failure, worth a retry, covered by the stale
// cache); only a request it rejects is ours (final).
func TestClientClassifiesAnswers(t *testing.T) {
	t.Parallel()
	const ok = `{"prices":{"SKU-1":{"unit_price":1299,"currency":"USD"}},"unknown":["SKU-2"]}`
	tests := []struct {
		name   string
		status int
		body   string
		ok     bool             // the answer is good
		want   resilience.Class // otherwise, how its error is classified
	}{
		{"answer", 200, ok, true, 0},
		{"extra fields and SKUs", 200, `{"prices":{"SKU-1":{"unit_price":1299,"currency":"USD","tax":0},"SKU-3":{"unit_price":1,"currency":"USD"}},"unknown":["SKU-2"],"next":null}`, true, 0},
		{"missing SKU", 200, `{"prices":{"SKU-1":{"unit_price":1299,"currency":"USD"}},"unknown":[]}`, false, resilience.Transient},
		{"priced and unknown", 200, `{"prices":{"SKU-1":{"unit_price":1299,"currency":"USD"},"SKU-2":{"unit_price":1,"currency":"USD"}},"unknown":["SKU-2"]}`, false, resilience.Transient},
		{"zero price", 200, `{"prices":{"SKU-1":{"unit_price":0,"currency":"USD"}},"unknown":["SKU-2"]}`, false, resilience.Transient},
		{"bad currency", 200, `{"prices":{"SKU-1":{"unit_price":1299,"currency":"usd"}},"unknown":["SKU-2"]}`, false, resilience.Transient},
		{"not JSON", 200, `<html>maintenance</html>`, false, resilience.Transient},
		{"body over the limit", 200, `{"unknown":["` + strings.Repeat("x", maxResponseBytes) + `"]}`, false, resilience.Transient},
		{"400", 400, `{"error":{"type":"invalid_request_error","message":"no"}}`, false, resilience.Final},
		{"422", 422, `{}`, false, resilience.Final},
		{"404: wrong CATALOG_URL", 404, `not found`, false, resilience.Transient},
		{"429", 429, `{}`, false, resilience.Transient},
		{"500", 500, `{}`, false, resilience.Transient},
		{"503", 503, `{}`, false, resilience.Transient},
		{"redirect, not followed", 302, ``, false, resilience.Transient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if got, want := r.URL.RawQuery, "skus=SKU-1,SKU-2"; got != want {
					t.Errorf("query: got %q, want %q", got, want)
				}
				if tt.status == http.StatusFound {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)
			c, err := newClient(srv.URL, 1)
			if err != nil {
				t.Fatal(err)
			}
			q, err := c.prices(t.Context(), []string{"SKU-1", "SKU-2"})
			if tt.ok {
				if err != nil || q.Prices["SKU-1"].UnitPrice != 1299 || fmt.Sprint(q.Unknown) != "[SKU-2]" {
					t.Errorf("got %+v, %v; want SKU-1 priced, SKU-2 unknown", q, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %+v, want an error", q)
			}
			if got := classify(err); got != tt.want {
				t.Errorf("classify(%v): got %v, want %v", err, got, tt.want)
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := map[string]func(*Config){
		"URL":          func(c *Config) { c.URL = "" },
		"scheme":       func(c *Config) { c.URL = "localhost:8083" },
		"ftp":          func(c *Config) { c.URL = "ftp://catalog" },
		"TTL":          func(c *Config) { c.TTL = 0 },
		"MaxStaleness": func(c *Config) { c.MaxStaleness = c.TTL - 1 },
		"CacheSize":    func(c *Config) { c.CacheSize = 0 },
		"Budget":       func(c *Config) { c.Budget = 0 },
		"Resilience":   func(c *Config) { c.Resilience.MaxAttempts = 0 },
	}
	for name, breakIt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.URL = "http://localhost:8083"
			breakIt(&cfg)
			if _, err := New(cfg, Options{}); err == nil {
				t.Errorf("New with a bad %s: got nil error", name)
			}
		})
	}
	cfg := DefaultConfig()
	cfg.URL = "http://localhost:8083"
	if _, err := New(cfg, Options{}); err != nil {
		t.Errorf("New with the defaults: %v", err)
	}
	if err := errors.Join(DefaultConfig().Validate()); err != nil {
		t.Errorf("DefaultConfig().Validate(): %v", err)
	}
}
