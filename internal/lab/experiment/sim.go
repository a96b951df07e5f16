package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// simulator speaks the admin API of paymentsim or of catalogsim: both take faults as
// POST /admin/faults {latency|hang|down, start_in, duration}, clear them with
// DELETE /admin/faults and start over with POST /admin/reset. It is a client of its own, not
// the simulators' types: the experiment treats the provider and the catalog as outside
// systems, as checkout does.
type simulator struct {
	name    string // for error messages: "paymentsim" or "catalogsim"
	baseURL string
	token   string
	client  *http.Client
}

func newSimulator(name, baseURL, token string) *simulator {
	return &simulator{name: name, baseURL: baseURL, token: token, client: &http.Client{Timeout: 5 * time.Second}}
}

// providerStats is the part of GET /admin/stats the audit reads.
type providerStats struct {
	TotalCharges        int            `json:"total_charges"`
	ChargesByReference  map[string]int `json:"charges_by_reference"`
	DuplicateReferences int            `json:"duplicate_references"`
	InFlight            int            `json:"in_flight"`
	MaxInFlight         int            `json:"max_in_flight"`
	MaxInFlightOutage   int            `json:"max_in_flight_during_fault"`
	ChargesDuringFault  int            `json:"charges_during_fault"`
	LookupsDuringFault  int            `json:"lookups_during_fault"`
	ChargesProcessed    int            `json:"charges_processed"`
	ChargesOverCapacity int            `json:"charges_over_capacity"`
	Capacity            int            `json:"capacity"`
	// RateLimited counts the requests answered 429 because they came above the provider's
	// rate limit.
	RateLimited int `json:"rate_limited"`
}

// catalogPrice is one entry of catalogsim's GET /admin/prices.
type catalogPrice struct {
	UnitPrice int64  `json:"unit_price"`
	Currency  string `json:"currency"`
}

// faultWindow is the body of POST /admin/faults.
type faultWindow struct {
	Latency       string  `json:"latency,omitempty"`
	LatencyFactor float64 `json:"latency_factor,omitempty"`
	ErrorRate     float64 `json:"error_rate,omitempty"`
	ErrorStatus   int     `json:"error_status,omitempty"`
	Hang          bool    `json:"hang,omitempty"`
	Down          bool    `json:"down,omitempty"`
	StartIn       string  `json:"start_in"`
	Duration      string  `json:"duration"`
}

func (s *simulator) reset(ctx context.Context) error {
	return s.do(ctx, http.MethodPost, "/admin/reset", nil, nil)
}

func (s *simulator) clearFaults(ctx context.Context) error {
	return s.do(ctx, http.MethodDelete, "/admin/faults", nil, nil)
}

// clearFaultsOnExit clears the simulator's faults at the end of a run, whatever ended it: a
// cancelled run too, with a few seconds of its own.
func (s *simulator) clearFaultsOnExit(ctx context.Context, log *slog.Logger) {
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.clearFaults(cleanup); err != nil {
		log.Warn("could not clear the simulator's faults", "simulator", s.name, "err", err)
	}
}

// startCatalog readies catalogsim for a run — no faults, the seed price list — and returns
// what the run's orders buy: its SKUs at its prices.
func (s *simulator) startCatalog(ctx context.Context) ([]pricedItem, error) {
	if err := s.clearFaults(ctx); err != nil {
		return nil, err
	}
	if err := s.reset(ctx); err != nil {
		return nil, err
	}
	prices, err := s.prices(ctx)
	if err != nil {
		return nil, err
	}
	return catalogItems(prices)
}

func (s *simulator) stats(ctx context.Context) (providerStats, error) {
	var st providerStats
	err := s.do(ctx, http.MethodGet, "/admin/stats", nil, &st)
	return st, err
}

// prices reads catalogsim's price list, SKU → price.
func (s *simulator) prices(ctx context.Context) (map[string]catalogPrice, error) {
	var p map[string]catalogPrice
	err := s.do(ctx, http.MethodGet, "/admin/prices", nil, &p)
	return p, err
}

// waitIdle waits, at most timeout, until the provider has no charge in flight.
func (s *simulator) waitIdle(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := s.stats(ctx)
		if err != nil {
			return err
		}
		if st.InFlight == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the provider still has %d charges in flight after %v; a run now would count them as its own", st.InFlight, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// scheduleFault scripts the outage relative to start: one window, or Config.Repeat of them.
// Each start_in is computed just before its request goes out, so a window is off by at most
// the request's one-way trip. Config.validate has kept the provider's own faults (hang,
// brownout, errors) away from catalogsim.
func (s *simulator) scheduleFault(ctx context.Context, cfg Config, start time.Time) error {
	w := faultWindow{Duration: cfg.OutageFor.String()}
	switch cfg.Fault {
	case FaultLatency:
		w.Latency = cfg.OutageLatency.String()
	case FaultHang:
		w.Hang = true
	case FaultDown:
		w.Down = true
	case FaultBrownout:
		w.LatencyFactor = cfg.LatencyFactor
	case FaultErrors:
		w.ErrorRate, w.ErrorStatus = cfg.ErrorRate, cfg.ErrorStatus
	}
	active := cfg.active()
	for k := range active.windows() {
		from, _ := active.window(k)
		w.StartIn = max(time.Until(start.Add(from)), 0).String()
		if err := s.do(ctx, http.MethodPost, "/admin/faults", w, nil); err != nil {
			return err
		}
	}
	return nil
}

// do sends an admin request with an optional JSON body and decodes a JSON answer into out.
func (s *simulator) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s %s: %w", s.name, method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.baseURL+path, body)
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", s.name, method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", s.name, method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s %s: %s: %s", s.name, method, path, resp.Status, bytes.TrimSpace(msg))
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s %s: decode answer: %w", s.name, method, path, err)
	}
	return nil
}
