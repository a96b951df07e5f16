// Package payment is checkout's client of the outside payment provider.
//
// Client speaks the provider protocol and nothing else: Client.Charge makes one charge
// attempt and classifies its outcome as a receipt or an *Error of kind ErrDeclined,
// ErrPermanent or ErrTransient; Client.FindCharges looks an order's charges up by reference,
// which is how an ambiguous attempt becomes a certain outcome.
//
// Protected puts a Client behind the resilience stack of internal/resilience (retry →
// circuit breaker → bulkhead → per-attempt timeout), with Classify telling the stack which
// errors are provider trouble. The API and the worker each charge through a Protected of
// their own, built by NewProtectedClient; internal/order sees it through a small interface
// and this package knows nothing of orders beyond their ids.
//
// The provider sees an order only as a reference string, and every attempt for one order
// carries the same Idempotency-Key (IdempotencyKey), so a charge whose response was lost is
// replayed by the provider instead of being made twice — as long as the provider still
// remembers the key.
package payment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Dependency is the provider's name as the fleet shares its breaker across
// checkout replicas and workers (internal/fleet), and as an operator names it
// to force it open (`checkout breaker open payment`).
const Dependency = "payment"

// Defaults for Config, chosen for a provider on the same network answering in ~200 ms.
const (
	// DefaultMaxConns caps a Client built without a MaxConns of its own at the static
	// bulkhead's default 4 slots. NewProtectedClient does not use it: it caps connections at
	// the policy's MaxConcurrency, by default the adaptive limit's maximum of 20, so the
	// provider may see up to 20 calls at once from each checkout or worker process.
	DefaultMaxConns              = 4
	DefaultDialTimeout           = time.Second
	DefaultTLSHandshakeTimeout   = 2 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
)

// maxResponseBytes bounds how much of a response body is read; a charge response is about
// 150 bytes and a lookup lists an order's few charges, so anything near the limit (some 400
// charges) is provider trouble, not an answer.
const maxResponseBytes = 64 << 10

// Config configures a Client. Zero durations and MaxConns take the defaults above.
type Config struct {
	// BaseURL is the provider's base URL, e.g. http://localhost:8082.
	BaseURL string
	// MaxConns caps connections to the provider; size it like the bulkhead in front of Charge.
	// Negative means no cap, for a client deliberately run without a bulkhead (the
	// experiment's modes none and timeout): a connection cap is a bulkhead too.
	MaxConns int
	// DialTimeout bounds establishing a TCP connection.
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake.
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout is a backstop for callers without a deadline. The per-attempt
	// timeout belongs to the caller's context, which Charge and FindCharges always honour.
	ResponseHeaderTimeout time.Duration
}

// Client charges payments through the provider and looks charges up. It is safe for
// concurrent use.
type Client struct {
	chargesURL *url.URL
	http       *http.Client
	transport  *http.Transport // under the tracing transport, for CloseIdleConnections
}

// NewClient returns a Client with its own transport; it never uses http.DefaultClient, whose
// unbounded connections and missing timeouts are exactly what a slow provider exploits.
func NewClient(cfg Config) (*Client, error) {
	base, err := url.Parse(cfg.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("payment: base URL %q: want an absolute http or https URL", cfg.BaseURL)
	}
	cfg = withDefaults(cfg)
	transport := newTransport(cfg)
	return &Client{
		chargesURL: base.JoinPath("v1", "charges"),
		http: &http.Client{
			Transport: traced(transport),
			// A redirect of a charge is a misconfigured base URL; following it would repost.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		transport: transport,
	}, nil
}

// traced gives every request to the provider a client span "POST /v1/charges" (the path
// carries no ids: the lookup's reference is in the query) and sends the W3C traceparent
// along. The span comes from the tracer provider of the caller's span — the server span of
// POST /orders, the worker's job span — so the client needs no provider of its own. A call
// without a caller's span (tracing off, or outside any span) goes to the transport directly:
// there is no trace to continue, and otelhttp's per-request work for a span nobody records
// (a tracer lookup, attribute sets, a request clone) was ~4 % of checkout's CPU under load
// (pprof). It changes nothing about re-sends: the request keeps GetBody nil (see newRequest).
func traced(rt http.RoundTripper) http.RoundTripper {
	return otelhttp.NewTransport(rt,
		otelhttp.WithFilter(func(r *http.Request) bool { return trace.SpanContextFromContext(r.Context()).IsValid() }),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }),
	)
}

func withDefaults(cfg Config) Config {
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.TLSHandshakeTimeout <= 0 {
		cfg.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	}
	if cfg.ResponseHeaderTimeout <= 0 {
		cfg.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	return cfg
}

func newTransport(cfg Config) *http.Transport {
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	maxConns, maxIdle := cfg.MaxConns, cfg.MaxConns
	if maxConns < 0 {
		maxConns, maxIdle = 0, 100 // 0: net/http's "no limit"
	}
	return &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DialContext:       dialer.DialContext,
		ForceAttemptHTTP2: true,
		// Calls beyond MaxConnsPerHost wait for a connection (bounded by their context) rather
		// than opening more: the provider never sees more concurrency than the bulkhead allows.
		MaxConnsPerHost:     maxConns,
		MaxIdleConns:        maxIdle,
		MaxIdleConnsPerHost: maxIdle,
		// Below the provider's own idle timeout (60 s for the simulator, commonly 60–75 s), so
		// idle connections are closed by us, not under a request going out: charges are not
		// re-sent by the transport (see newRequest), so that race would fail the attempt.
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   cfg.TLSHandshakeTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
	}
}

// CloseIdleConnections closes kept-alive connections to the provider, for shutdown.
func (c *Client) CloseIdleConnections() {
	c.transport.CloseIdleConnections() // the tracing transport does not pass the call on
}

// ChargeRequest asks for Amount minor units of Currency from PaymentMethod, for an order.
type ChargeRequest struct {
	OrderID       string
	Amount        int64
	Currency      string
	PaymentMethod string
}

// Receipt is a successful charge.
type Receipt struct {
	// ChargeID is the provider's id, e.g. "ch_…"; the same on every replay.
	ChargeID string
	Amount   int64
	Currency string
	// Replayed reports that the provider answered from its idempotency ledger: an earlier
	// attempt had already charged, and its response was lost or is being retried. Always
	// false in receipts from FindCharges.
	Replayed bool
}

// IdempotencyKey is the provider-side key for an order. It depends on the order only, so every
// attempt — synchronous, retried, or from the worker after a crash — asks for the same charge.
func IdempotencyKey(orderID string) string {
	return "order-" + orderID
}

// Charge charges req and returns the receipt. A failure is an *Error wrapped with the order id;
// classify it with errors.Is against ErrDeclined, ErrPermanent and ErrTransient (or IsDeclined,
// IsTransient). Charge makes
// one attempt, never re-sent by the HTTP transport: retrying is the caller's decision, and is
// safe with the same key while the provider remembers it.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (Receipt, error) {
	receipt, err := c.charge(ctx, req)
	if err != nil {
		return Receipt{}, fmt.Errorf("charge order %s: %w", req.OrderID, err)
	}
	return receipt, nil
}

// chargeBody is the protocol's request body.
type chargeBody struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Reference     string `json:"reference"`
}

// chargeResult is the protocol's 201 body.
type chargeResult struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Reference string `json:"reference"`
}

func (c *Client) charge(ctx context.Context, req ChargeRequest) (Receipt, error) {
	httpReq, err := c.newRequest(ctx, req)
	if err != nil {
		return Receipt{}, &Error{Kind: ErrPermanent, Err: err}
	}
	resp, body, err := c.send(httpReq) //nolint:bodyclose // send reads the body and closes it
	if err != nil {
		return Receipt{}, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Receipt{}, newStatusError(kindOf(resp.StatusCode), resp, body)
	}
	return parseReceipt(resp, body, req)
}

// send makes one request and reads the response body whole. A failure is a transient *Error:
// nothing arrived, or not all of it.
func (c *Client) send(httpReq *http.Request) (*http.Response, []byte, error) {
	resp, err := c.http.Do(httpReq)
	if err != nil {
		return nil, nil, &Error{Kind: ErrTransient, Err: err}
	}
	defer resp.Body.Close()

	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, nil, &Error{Kind: ErrTransient, StatusCode: resp.StatusCode, Err: fmt.Errorf("read response: %w", err)}
	}
	if len(body) > maxResponseBytes {
		return nil, nil, &Error{Kind: ErrTransient, StatusCode: resp.StatusCode, Err: errors.New("response body over 64 KiB")}
	}
	return resp, body, nil
}

func (c *Client) newRequest(ctx context.Context, req ChargeRequest) (*http.Request, error) {
	body, err := json.Marshal(chargeBody{
		Amount:        req.Amount,
		Currency:      req.Currency,
		PaymentMethod: req.PaymentMethod,
		Reference:     req.OrderID,
	})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.chargesURL.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "application/json")
	httpReq.Header.Set("Idempotency-Key", IdempotencyKey(req.OrderID))
	// net/http's Transport re-sends a request carrying an Idempotency-Key by itself when a
	// reused keep-alive connection breaks before the answer, even after the request was
	// written — provided it can rewind the body, which GetBody allows. The first send may have
	// charged; the caller would then see only the re-send's outcome, e.g. a dial error that
	// looks like "nothing was sent". Without GetBody the Transport re-sends nothing it has
	// begun to write, and every attempt is the resilience stack's decision, visible to it.
	httpReq.GetBody = nil
	return httpReq, nil
}

// parseReceipt reads a 2xx body. One that is not a succeeded charge is treated as provider
// trouble (transient): retrying with the same key replays the provider's real answer. A
// succeeded charge for another amount, currency or reference is never taken as payment
// either, and it is no rejection of our request: the provider reports a charge, which a key
// collision or a provider bug put there, so the outcome is unknown (ReceiptMismatchError).
func parseReceipt(resp *http.Response, body []byte, req ChargeRequest) (Receipt, error) {
	var res chargeResult
	if err := json.Unmarshal(body, &res); err != nil {
		return Receipt{}, &Error{Kind: ErrTransient, StatusCode: resp.StatusCode, Err: fmt.Errorf("decode response: %w", err)}
	}
	if res.ID == "" || res.Status != "succeeded" {
		return Receipt{}, &Error{Kind: ErrTransient, StatusCode: resp.StatusCode,
			Err: fmt.Errorf("unexpected charge id %q with status %q", res.ID, res.Status)}
	}
	if res.Amount != req.Amount || res.Currency != req.Currency || res.Reference != req.OrderID {
		return Receipt{}, &Error{Kind: ErrTransient, StatusCode: resp.StatusCode, Err: &ReceiptMismatchError{
			ChargeID:      res.ID,
			WantAmount:    req.Amount,
			WantCurrency:  req.Currency,
			WantReference: req.OrderID,
			GotAmount:     res.Amount,
			GotCurrency:   res.Currency,
			GotReference:  res.Reference,
		}}
	}
	return Receipt{
		ChargeID: res.ID,
		Amount:   res.Amount,
		Currency: res.Currency,
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true",
	}, nil
}
