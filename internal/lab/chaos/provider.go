package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Provider speaks the simulator's admin API and reads the provider's
// PaymentIntents list. It is a client of its own, sharing no types with
// paymentsim: the soak treats the provider as an outside system, as checkout
// does.
type Provider struct {
	URL    string
	client *http.Client
}

// NewProvider returns a client of the simulator at baseURL.
func NewProvider(baseURL string) *Provider {
	return &Provider{URL: baseURL, client: &http.Client{Timeout: 5 * time.Second}}
}

// secretKey is the test key the audit reads the list with: the simulator
// takes any.
const secretKey = "sk_test_chaos"

// Stats is the part of GET /admin/stats the audit reads.
type Stats struct {
	TotalCharges        int            `json:"total_charges"`
	Declines            int            `json:"declines"`
	ChargesByReference  map[string]int `json:"charges_by_reference"`
	DuplicateReferences int            `json:"duplicate_references"`
	InFlight            int            `json:"in_flight"`
	MaxInFlight         int            `json:"max_in_flight"`
}

// Charge is a successful charge as the provider's list shows it: a
// succeeded PaymentIntent.
type Charge struct {
	ID        string // the PaymentIntent's id, which a paid order stores
	Amount    int64
	Currency  string // upper case, as orders store it
	Reference string // its metadata[order_id]
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

// Charges walks the provider's whole PaymentIntents list, a hundred a page,
// and returns its charges (the succeeded intents) by order id, newest first.
// The audit reads it once the provider is idle, so the walk sees every
// intent.
func (p *Provider) Charges(ctx context.Context) (map[string][]Charge, error) {
	out := map[string][]Charge{}
	for after := ""; ; {
		var page struct {
			Data []struct {
				ID       string            `json:"id"`
				Status   string            `json:"status"`
				Amount   int64             `json:"amount"`
				Currency string            `json:"currency"`
				Metadata map[string]string `json:"metadata"`
			} `json:"data"`
			HasMore bool `json:"has_more"`
		}
		query := url.Values{"limit": {"100"}}
		if after != "" {
			query.Set("starting_after", after)
		}
		if err := p.do(ctx, http.MethodGet, "/v1/payment_intents?"+query.Encode(), "", http.StatusOK, &page); err != nil {
			return out, err
		}
		for _, pi := range page.Data {
			after = pi.ID
			if pi.Status != "succeeded" {
				continue
			}
			ref := pi.Metadata["order_id"]
			out[ref] = append(out[ref], Charge{ID: pi.ID, Amount: pi.Amount, Currency: strings.ToUpper(pi.Currency), Reference: ref})
		}
		if !page.HasMore {
			return out, nil
		}
	}
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
	if strings.HasPrefix(path, "/v1/") {
		req.Header.Set("Authorization", "Bearer "+secretKey)
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
