package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Provider speaks the simulator's admin API and the provider's lookup. It is
// a client of its own, sharing no types with paymentsim: the soak treats the
// provider as an outside system, as checkout does.
type Provider struct {
	URL    string
	client *http.Client
}

// NewProvider returns a client of the simulator at baseURL.
func NewProvider(baseURL string) *Provider {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = lookupConcurrency
	return &Provider{URL: baseURL, client: &http.Client{Transport: t, Timeout: 5 * time.Second}}
}

// lookupConcurrency is how many lookups the audit runs at once: each takes
// the simulator's processing latency (200 ms by default), and a soak's
// thousands of orders should be audited in seconds.
const lookupConcurrency = 64

// Stats is the part of GET /admin/stats the audit reads.
type Stats struct {
	TotalCharges        int            `json:"total_charges"`
	Declines            int            `json:"declines"`
	ChargesByReference  map[string]int `json:"charges_by_reference"`
	DuplicateReferences int            `json:"duplicate_references"`
	InFlight            int            `json:"in_flight"`
	MaxInFlight         int            `json:"max_in_flight"`
}

// Charge is a successful charge as the provider's lookup lists it.
type Charge struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Reference string `json:"reference"`
}

// Inject adds a fault (POST /admin/faults).
func (p *Provider) Inject(ctx context.Context, fault string) error {
	return p.do(ctx, http.MethodPost, "/admin/faults", fault, http.StatusCreated, nil)
}

// Heal clears every fault (DELETE /admin/faults).
func (p *Provider) Heal(ctx context.Context) error {
	return p.do(ctx, http.MethodDelete, "/admin/faults", "", http.StatusNoContent, nil)
}

// Stats reads the ledger's counts.
func (p *Provider) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := p.do(ctx, http.MethodGet, "/admin/stats", "", http.StatusOK, &st)
	return st, err
}

// Charges is the provider's lookup: its successful charges for reference.
func (p *Provider) Charges(ctx context.Context, reference string) ([]Charge, error) {
	var page struct {
		Data []Charge `json:"data"`
	}
	err := p.do(ctx, http.MethodGet, "/v1/charges?reference="+url.QueryEscape(reference), "", http.StatusOK, &page)
	return page.Data, err
}

// ChargesOf runs the lookup for every reference, lookupConcurrency at a
// time, and returns the charges by reference; a failed lookup leaves its
// reference out and its error in the joined error.
func (p *Provider) ChargesOf(ctx context.Context, refs []string) (map[string][]Charge, error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		sem  = make(chan struct{}, lookupConcurrency)
		out  = make(map[string][]Charge, len(refs))
	)
	for _, ref := range refs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			charges, err := p.Charges(ctx, ref)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("lookup of %s: %w", ref, err))
				return
			}
			out[ref] = charges
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// WaitIdle waits, at most within, until the provider has no charge in
// processing: it finishes charges whose caller gave up, and those still
// count.
func (p *Provider) WaitIdle(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		st, err := p.Stats(ctx)
		if err == nil && st.InFlight == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("provider not idle after %v (in flight %d, last error %w)", within, st.InFlight, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *Provider) do(ctx context.Context, method, path, body string, want int, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, p.URL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	if into == nil {
		return nil
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("%s %s: decode: %w", method, path, err)
	}
	return nil
}
