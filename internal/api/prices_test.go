package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/catalog"
	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
)

// TestPriceCheckBeforeAnythingIsWritten: with a catalog, an order is placed
// only at the catalog's prices; every refusal stores nothing.
func TestPriceCheckBeforeAnythingIsWritten(t *testing.T) {
	t.Parallel()
	cfg := catalog.DefaultConfig()
	b, _ := setup(t, options{catalog: &cfg})
	const (
		priced  = `{"sku":"SKU-1","quantity":2,"unit_price":1299}`
		cheaper = `{"sku":"SKU-1","quantity":2,"unit_price":999}`
		unknown = `{"sku":"SKU-404","quantity":1,"unit_price":100}`
		euros   = `{"sku":"SKU-9","quantity":1,"unit_price":100}`
	)
	order := func(currency string, items ...string) string {
		return `{"customer_id":"cus_1","currency":"` + currency + `","payment_method":"pm_card_visa","items":[` + strings.Join(items, ",") + `]}`
	}
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantType   string
		wantField  string // for 422
		wantPrice  string // a SKU the 409 must price
	}{
		{"catalog price", order("USD", priced), 201, "", "", ""},
		{"changed price", order("USD", cheaper), 409, "urn:problem-type:checkout:price-changed", "", "SKU-1"},
		{"unknown SKU", order("USD", priced, unknown), 422, "urn:problem-type:checkout:invalid-order", "items[1].sku", ""},
		{"currency mismatch", order("USD", euros), 409, "urn:problem-type:checkout:price-changed", "", "SKU-9"},
	}
	for _, tt := range tests {
		before, _ := b.rows(t)
		r := b.post(t, newKey(), tt.body)
		if r.status != tt.wantStatus {
			t.Fatalf("%s: status %d (%s), want %d", tt.name, r.status, r.body, tt.wantStatus)
		}
		if tt.wantStatus == 201 {
			continue
		}
		p := decodeProblem(t, r)
		if p.Type != tt.wantType {
			t.Errorf("%s: type %q, want %q", tt.name, p.Type, tt.wantType)
		}
		if tt.wantField != "" && (len(p.Errors) != 1 || p.Errors[0].Field != tt.wantField) {
			t.Errorf("%s: errors %+v, want one for %s", tt.name, p.Errors, tt.wantField)
		}
		if tt.wantPrice != "" {
			if got, ok := p.Prices[tt.wantPrice]; !ok || got.UnitPrice == 0 || got.Currency == "" {
				t.Errorf("%s: prices %+v, want the current price of %s", tt.name, p.Prices, tt.wantPrice)
			}
		}
		if after, _ := b.rows(t); after != before {
			t.Errorf("%s: %d orders stored, want none", tt.name, after-before)
		}
	}

	// A replay repeats its answer even after the catalog changed its price.
	key := newKey()
	first := b.post(t, key, order("USD", priced))
	b.catalog.SetPrice("SKU-1", catalogsim.Price{UnitPrice: 1499, Currency: "USD"})
	if again := b.post(t, key, order("USD", priced)); again.status != first.status || string(again.body) != string(first.body) {
		t.Errorf("replay after a price change = %d %s, want the first answer %d", again.status, again.body, first.status)
	}
}

// TestStaleCatalogPricesAreUsedAndMarked: with the catalog down, an order
// whose prices were seen recently is accepted from the cache and the
// answer says so; one with no cached price gets 503 + Retry-After.
func TestStaleCatalogPricesAreUsedAndMarked(t *testing.T) {
	t.Parallel()
	cfg := catalog.DefaultConfig()
	cfg.TTL = time.Millisecond // stale by the next request; usable stale for the default 10 min
	b, _ := setup(t, options{catalog: &cfg})
	body := `{"customer_id":"cus_1","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-1","quantity":1,"unit_price":1299}]}`
	if r := b.post(t, newKey(), body); r.status != http.StatusCreated || r.header.Get("Catalog-Prices") != "" {
		t.Fatalf("warm-up = %d with Catalog-Prices %q, want 201 unmarked", r.status, r.header.Get("Catalog-Prices"))
	}
	catalogDown(t, b)

	r := b.post(t, newKey(), body)
	if r.status != http.StatusCreated || !strings.HasPrefix(r.header.Get("Catalog-Prices"), "stale; age=") {
		t.Errorf("with the catalog down = %d, Catalog-Prices %q; want 201 marked stale", r.status, r.header.Get("Catalog-Prices"))
	}
	cold := `{"customer_id":"cus_1","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-2","quantity":1,"unit_price":500}]}`
	r = b.post(t, newKey(), cold)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("uncached SKU with the catalog down = %d (Retry-After %q), want 503 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	if p := decodeProblem(t, r); p.Type != "urn:problem-type:checkout:catalog-unavailable" {
		t.Errorf("problem type %q, want catalog-unavailable", p.Type)
	}
}

func catalogDown(t *testing.T, b *bundle) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.catalogURL+"/admin/faults", strings.NewReader(`{"down":true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("catalog fault: status %d", resp.StatusCode)
	}
}
