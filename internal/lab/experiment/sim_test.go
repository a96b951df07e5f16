package experiment

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
)

func TestScheduleFault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault FaultKind
		want  faultWindow
	}{
		{FaultLatency, faultWindow{Latency: "10s", Duration: "3s"}},
		{FaultDown, faultWindow{Down: true, Duration: "3s"}},
		{FaultHang, faultWindow{Hang: true, Duration: "3s"}},
		{FaultBrownout, faultWindow{LatencyFactor: 5, Duration: "3s"}},
		{FaultErrors, faultWindow{ErrorRate: 0.5, ErrorStatus: 503, Duration: "3s"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.fault), func(t *testing.T) {
			t.Parallel()
			var got faultWindow
			var auth string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				auth = r.Header.Get("Authorization")
				if r.Method != http.MethodPost || r.URL.Path != "/admin/faults" {
					http.NotFound(w, r)
					return
				}
				_ = json.NewDecoder(r.Body).Decode(&got)
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(srv.Close)

			cfg := DefaultConfig()
			cfg.Fault, cfg.LatencyFactor, cfg.ErrorRate, cfg.ErrorStatus = tt.fault, 5, 0.5, 503
			start := time.Now().Add(lead)
			if err := newSimulator("paymentsim", srv.URL, "secret").scheduleFault(t.Context(), cfg, start); err != nil {
				t.Fatal(err)
			}
			startIn, err := time.ParseDuration(got.StartIn)
			// The window starts 0.5 s after t=0, which is at most lead away.
			if err != nil || startIn <= cfg.OutageStart || startIn > cfg.OutageStart+lead {
				t.Errorf("start_in = %q, want within (%v, %v]", got.StartIn, cfg.OutageStart, cfg.OutageStart+lead)
			}
			got.StartIn = ""
			if got != tt.want {
				t.Errorf("fault = %+v, want %+v", got, tt.want)
			}
			if auth != "Bearer secret" {
				t.Errorf("Authorization = %q, want the bearer token", auth)
			}
		})
	}
}

// TestScheduleFaultRepeats checks a flapping provider's windows: one request per window,
// each starting a period after the one before.
func TestScheduleFaultRepeats(t *testing.T) {
	t.Parallel()
	var got []faultWindow
	var startsAt []time.Time // when each window starts, by the server's clock
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var f faultWindow
		_ = json.NewDecoder(r.Body).Decode(&f)
		startIn, _ := time.ParseDuration(f.StartIn)
		got, startsAt = append(got, f), append(startsAt, time.Now().Add(startIn)) // the requests come one after another
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	cfg := DefaultConfig()
	cfg.Fault, cfg.OutageStart, cfg.OutageFor, cfg.Repeat, cfg.RepeatEvery = FaultHang, time.Second, 2*time.Second, 5, 4*time.Second
	start := time.Now().Add(lead)
	if err := newSimulator("paymentsim", srv.URL, "").scheduleFault(t.Context(), cfg, start); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("%d windows scheduled, want 5", len(got))
	}
	for k, w := range got {
		// A window starts late by the request's one-way trip at most.
		want := start.Add(time.Second + time.Duration(k)*4*time.Second)
		if late := startsAt[k].Sub(want); late < 0 || late > time.Second || !w.Hang || w.Duration != "2s" {
			t.Errorf("window %d = %+v, starting %v after %v; want a 2s hang starting then", k, w, late, want)
		}
	}
}

func TestSimulatorErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"type":"authentication_error"}}`, http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	err := newSimulator("paymentsim", srv.URL, "").reset(t.Context())
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "authentication_error") {
		t.Errorf("reset() = %v, want an error naming the status and the simulator's message", err)
	}
}

func TestSimulatorStats(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"total_charges":3,"declines":0,"charges_by_reference":{"o1":2,"o2":1},"duplicate_references":1,"idempotency_keys":3,"in_flight":0,"max_in_flight":7,"max_in_flight_during_fault":5,"rate_limited":4}`))
	}))
	t.Cleanup(srv.Close)
	got, err := newSimulator("paymentsim", srv.URL, "").stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got.TotalCharges != 3 || got.DuplicateReferences != 1 || got.MaxInFlight != 7 || got.MaxInFlightOutage != 5 || got.ChargesByReference["o1"] != 2 || got.RateLimited != 4 {
		t.Errorf("stats = %+v, want 3 charges, 1 duplicate, max in flight 7, 4 rate-limited", got)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := DefaultConfig()
	valid.CheckoutURL, valid.SimulatorURL, valid.DatabaseURL = "http://localhost:8080", "http://localhost:8082", "postgres://localhost/x"
	tests := []struct {
		name    string
		change  func(*Config)
		wantErr string
	}{
		{"defaults with URLs", func(*Config) {}, ""},
		{"relative checkout URL", func(c *Config) { c.CheckoutURL = "localhost:8080" }, "checkout URL"},
		{"no database", func(c *Config) { c.DatabaseURL = "" }, "database URL"},
		{"unknown fault", func(c *Config) { c.Fault = "slow" }, `fault "slow"`},
		{"zero rate", func(c *Config) { c.Rate = 0 }, "rate"},
		{"zero latency for a latency fault", func(c *Config) { c.OutageLatency = 0 }, "outage latency"},
		{"zero latency is fine when down", func(c *Config) { c.Fault, c.OutageLatency = FaultDown, 0 }, ""},
		{"no outage length", func(c *Config) { c.OutageFor = 0 }, "outage length"},
		{"no fault needs no outage", func(c *Config) { c.Fault, c.OutageFor = FaultNone, 0 }, ""},
		{"negative ramp", func(c *Config) { c.RateTo = -1 }, "ramp"},
		{"catalog outage", func(c *Config) { *c = catalogConfig(CatalogOutageConfig(), *c) }, ""},
		{"catalog cold start", func(c *Config) { *c = catalogConfig(CatalogColdStartConfig(), *c) }, ""},
		{"catalog fault without a catalog", func(c *Config) { c.FaultTarget = TargetCatalog }, "catalog URL is required"},
		{"catalog cannot hang", func(c *Config) {
			*c = catalogConfig(CatalogOutageConfig(), *c)
			c.Fault = FaultHang
		}, "for the catalog"},
		{"unknown target", func(c *Config) { c.FaultTarget = "inventory" }, `fault target "inventory"`},
		{"relative catalog URL", func(c *Config) { c.CatalogURL = "localhost:8083" }, "catalog URL"},
		{"the ramp", func(c *Config) {
			r := RampConfig()
			r.CheckoutURL, r.SimulatorURL, r.DatabaseURL = c.CheckoutURL, c.SimulatorURL, c.DatabaseURL
			*c = r
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid
			tt.change(&cfg)
			err := cfg.validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// catalogConfig is scenario with base's URLs and a catalog.
func catalogConfig(scenario, base Config) Config {
	scenario.CheckoutURL, scenario.SimulatorURL, scenario.DatabaseURL = base.CheckoutURL, base.SimulatorURL, base.DatabaseURL
	scenario.CatalogURL = "http://localhost:8083"
	return scenario
}

// TestCatalogSimulator speaks to the real catalogsim: the fault body the experiment sends is
// one catalogsim accepts (it rejects unknown fields), the price list decodes, and the token
// is sent.
func TestCatalogSimulator(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(catalogsim.New(catalogsim.Config{AdminToken: "secret"}))
	t.Cleanup(srv.Close)
	cat := newSimulator("catalogsim", srv.URL, "secret")

	prices, err := cat.prices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for sku, want := range catalogsim.Seed() {
		if got := prices[sku]; got.UnitPrice != want.UnitPrice || got.Currency != want.Currency {
			t.Errorf("price of %s = %+v, want %+v", sku, got, want)
		}
	}

	for _, fault := range []FaultKind{FaultDown, FaultLatency} {
		cfg := catalogConfig(CatalogOutageConfig(), DefaultConfig())
		cfg.Fault, cfg.OutageLatency = fault, 2*time.Second
		if err := cat.scheduleFault(t.Context(), cfg, time.Now().Add(lead)); err != nil {
			t.Fatalf("schedule %s: %v", fault, err)
		}
	}
	var view struct {
		Windows []struct {
			Fault struct {
				Latency string `json:"latency"`
				Down    bool   `json:"down"`
			} `json:"fault"`
			Start time.Time `json:"starts_at"`
			End   time.Time `json:"ends_at"`
		} `json:"windows"`
	}
	if err := cat.do(t.Context(), http.MethodGet, "/admin/faults", nil, &view); err != nil {
		t.Fatal(err)
	}
	if len(view.Windows) != 2 || !view.Windows[0].Fault.Down || view.Windows[1].Fault.Latency != "2s" {
		t.Fatalf("windows = %+v, want down, then 2s latency", view.Windows)
	}
	if d := view.Windows[0].End.Sub(view.Windows[0].Start); d != 10*time.Second {
		t.Errorf("down window lasts %v, want the scenario's 10s", d)
	}
	if until := time.Until(view.Windows[0].Start); until < 4*time.Second || until > 5*time.Second+lead {
		t.Errorf("down window starts in %v, want about the scenario's 5s warm-up", until)
	}
	// A run starts the catalog afresh: no faults, and orders for every SKU of its list.
	items, err := cat.startCatalog(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.do(t.Context(), http.MethodGet, "/admin/faults", nil, &view); err != nil || len(view.Windows) != 0 {
		t.Errorf("after startCatalog: windows %+v, err %v; want none", view.Windows, err)
	}
	if len(items) != len(catalogsim.Seed()) || items[0] != (pricedItem{SKU: "SKU-1", UnitPrice: 1299, Currency: "USD"}) {
		t.Errorf("items = %+v, want the seed catalog's SKUs, SKU-1 first", items)
	}
	if err := newSimulator("catalogsim", srv.URL, "wrong").reset(t.Context()); err == nil || !strings.Contains(err.Error(), "catalogsim POST /admin/reset: 401") {
		t.Errorf("reset with a wrong token = %v, want a 401 naming catalogsim", err)
	}
}
