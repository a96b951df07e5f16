package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// Transport limits, as in internal/payment: a catalog on the same network.
const (
	dialTimeout           = time.Second
	tlsHandshakeTimeout   = 2 * time.Second
	responseHeaderTimeout = 30 * time.Second // a backstop; the policy's attempt timeout comes first
	// maxResponseBytes bounds the body read. A full answer for maxBatch
	// SKUs of 64 bytes is about 15 KiB; anything near the limit is the
	// catalog's trouble, not prices.
	maxResponseBytes = 256 << 10
)

// maxBatch is the most SKUs one request names: an order holds at most 100
// items, so one order is one request. The protocol's limit (README).
const maxBatch = 100

// errRejected means the catalog refused our request itself (400, 422): a
// bug on our side that retrying or a stale answer would only hide. The
// policy treats it as final; the Service returns it as it is.
var errRejected = errors.New("catalog rejected the request")

// classify is the catalog policy's Options.Classify: everything but a
// rejected request is the catalog's trouble (transient), including 404s
// and redirects, which mean a wrong CATALOG_URL — an outage to fix, served
// from the cache meanwhile, not a reason to fail orders.
func classify(err error) resilience.Class {
	if errors.Is(err, errRejected) {
		return resilience.Final
	}
	return resilience.Transient
}

// client speaks the catalog protocol. It makes one attempt per call; the
// Service puts it behind the policy.
type client struct {
	pricesURL string
	http      *http.Client
}

// newClient returns a client with its own transport, never
// http.DefaultClient, whose unbounded connections and missing timeouts are
// what a slow dependency exploits. maxConns caps connections to the
// catalog (size it like the bulkhead); negative means no cap.
func newClient(baseURL string, maxConns int) (*client, error) {
	base, err := url.Parse(baseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("catalog: base URL %q: want an absolute http or https URL", baseURL)
	}
	maxIdle := maxConns
	if maxConns < 0 {
		maxConns, maxIdle = 0, 100 // 0: net/http's "no limit"
	}
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &client{
		pricesURL: base.JoinPath("v1", "prices").String(),
		http: &http.Client{
			Transport: &http.Transport{
				Proxy:             http.ProxyFromEnvironment,
				DialContext:       dialer.DialContext,
				ForceAttemptHTTP2: true,
				// Calls beyond the cap wait for a connection (bounded by
				// their context) instead of opening more.
				MaxConnsPerHost:       maxConns,
				MaxIdleConns:          maxIdle,
				MaxIdleConnsPerHost:   maxIdle,
				IdleConnTimeout:       90 * time.Second,
				TLSHandshakeTimeout:   tlsHandshakeTimeout,
				ResponseHeaderTimeout: responseHeaderTimeout,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// pricesBody is the protocol's 200 body.
type pricesBody struct {
	Prices map[string]struct {
		UnitPrice int64  `json:"unit_price"`
		Currency  string `json:"currency"`
	} `json:"prices"`
	Unknown []string `json:"unknown"`
}

// prices asks the catalog for skus: 1 to maxBatch distinct SKUs, none
// empty or holding a comma (the protocol's separator). The answer covers
// every SKU asked for, or prices returns an error: a transient one for
// anything the catalog got wrong, errRejected when it refused the request.
func (c *client) prices(ctx context.Context, skus []string) (Quote, error) {
	escaped := make([]string, len(skus))
	for i, s := range skus {
		escaped[i] = url.QueryEscape(s)
	}
	// Commas between SKUs stay literal, as the protocol writes them.
	target := c.pricesURL + "?skus=" + strings.Join(escaped, ",")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return Quote{}, fmt.Errorf("catalog: build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return Quote{}, fmt.Errorf("catalog: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return Quote{}, fmt.Errorf("catalog: status %d: read body: %w", resp.StatusCode, err)
	}
	switch {
	case len(body) > maxResponseBytes:
		return Quote{}, fmt.Errorf("catalog: status %d: body over %d bytes", resp.StatusCode, maxResponseBytes)
	case resp.StatusCode == http.StatusBadRequest, resp.StatusCode == http.StatusUnprocessableEntity:
		return Quote{}, fmt.Errorf("catalog: status %d: %w", resp.StatusCode, errRejected)
	case resp.StatusCode != http.StatusOK:
		return Quote{}, fmt.Errorf("catalog: status %d", resp.StatusCode)
	}
	q, err := parseQuote(body, skus)
	if err != nil {
		return Quote{}, fmt.Errorf("catalog: status 200: %w", err)
	}
	return q, nil
}

// parseQuote reads a 200 body and checks it answers for exactly the SKUs
// asked: each priced in a currency code with a positive price, or listed as
// unknown, never both and never missing. Anything else is a catalog bug,
// and a price check on half an answer could let a wrong price through.
// Extra SKUs are ignored, like unknown fields.
func parseQuote(body []byte, skus []string) (Quote, error) {
	var b pricesBody
	if err := json.Unmarshal(body, &b); err != nil {
		return Quote{}, fmt.Errorf("decode body: %w", err)
	}
	q := Quote{Prices: make(map[string]Price, len(skus))}
	for _, sku := range skus {
		p, priced := b.Prices[sku]
		unknown := slices.Contains(b.Unknown, sku)
		switch {
		case priced && unknown:
			return Quote{}, fmt.Errorf("SKU %q is both priced and unknown", sku)
		case unknown:
			q.Unknown = append(q.Unknown, sku)
		case !priced:
			return Quote{}, fmt.Errorf("SKU %q is missing from the answer", sku)
		case p.UnitPrice <= 0 || !isCurrency(p.Currency):
			return Quote{}, fmt.Errorf("SKU %q has an invalid price %d %q", sku, p.UnitPrice, p.Currency)
		default:
			q.Prices[sku] = Price{UnitPrice: p.UnitPrice, Currency: p.Currency}
		}
	}
	slices.Sort(q.Unknown)
	return q, nil
}

// isCurrency reports whether s looks like an ISO 4217 code. Which codes
// checkout accepts is internal/order's rule; a catalog price in another
// currency simply never matches an order.
func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range len(s) {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// closeIdleConnections closes kept-alive connections, for shutdown.
func (c *client) closeIdleConnections() { c.http.CloseIdleConnections() }
