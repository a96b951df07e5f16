// Package payment is checkout's client of the outside payment provider, Stripe (or anything
// that speaks the subset of Stripe's PaymentIntents API that docs/design.md, "Provider
// protocol", fixes: paymentsim in the demo and the tests, stripe-mock in the contract test).
//
// Client speaks it through Stripe's official SDK, github.com/stripe/stripe-go, and nothing
// else: Client.Charge creates and confirms one PaymentIntent for an order and classifies
// the outcome (classify, the one table from Stripe's errors to ours) as a receipt or an
// *Error of kind ErrDeclined, ErrPermanent, ErrPending or ErrTransient; Client.FindCharges
// reads the PaymentIntents list over a window of creation time, filtered by the order id in
// their metadata, which is how an ambiguous attempt becomes a certain outcome;
// Client.ListCharges reads one page of that list for the ledger reconciliation.
//
// Protected puts a Client behind the resilience stack of internal/resilience (retry →
// circuit breaker → bulkhead → per-attempt timeout), with Classify telling the stack which
// errors are provider trouble. The API and the worker each charge through a Protected of
// their own, built by NewProtectedClient; internal/order sees it through a small interface
// and this package knows nothing of orders beyond their ids.
//
// The provider sees an order as the metadata order_id of its PaymentIntent, and every
// attempt for one order carries the same Idempotency-Key (IdempotencyKey), so a create whose
// response was lost is replayed by the provider instead of being made twice — as long as the
// provider still remembers the key.
package payment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Dependency is the provider's name as the fleet shares its breaker across
// checkout replicas and workers (internal/fleet), and as an operator names it
// to force it open (`checkout breaker open payment`).
const Dependency = "payment"

// StripeAPIBase is Stripe's API, the default base URL.
const StripeAPIBase = "https://api.stripe.com"

// Defaults for Config, chosen for a provider on the same network answering in ~200 ms.
const (
	// DefaultMaxConns caps a Client built without a MaxConns of its own at the static
	// bulkhead's default 4 slots. NewProtectedClient does not use it: it caps connections at
	// the policy's MaxConcurrency, by default twice the adaptive limit's maximum of 20 (calls
	// given up on keep their connections until answered), so the provider may see up to 40
	// connections from each checkout or worker process, most of them calls it still holds.
	DefaultMaxConns              = 4
	DefaultDialTimeout           = time.Second
	DefaultTLSHandshakeTimeout   = 2 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
)

// maxResponseBytes bounds how much of a response body is read. A PaymentIntent at Stripe is
// about 1.5 KB, so a list page of 100 is some 150 KB; a body near 1 MiB is provider trouble,
// not an answer. The SDK reads bodies whole, so the bound is the transport's (limitBody).
const maxResponseBytes = 1 << 20

// Config configures a Client. Zero durations and MaxConns take the defaults above.
type Config struct {
	// BaseURL is the provider's base URL: StripeAPIBase, or paymentsim's or stripe-mock's.
	BaseURL string
	// SecretKey is the API key sent as a Bearer token (sk_test_… or sk_live_…). It is never
	// logged: the SDK's own logging is off (see NewClient).
	SecretKey string
	// MaxConns caps connections to the provider; size it like the bulkhead in front of Charge.
	// Negative means no cap, for a client deliberately run without a bulkhead (the
	// experiment's modes none and timeout): a connection cap is a bulkhead too.
	MaxConns int
	// DialTimeout bounds establishing a TCP connection.
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake.
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout is a backstop for callers without a deadline. The per-attempt
	// timeout belongs to the caller's context, which every call honours.
	ResponseHeaderTimeout time.Duration
}

// Client creates PaymentIntents and reads them back. It is safe for concurrent use.
type Client struct {
	sc        *stripe.Client
	transport *http.Transport // under the other layers, for CloseIdleConnections
}

// NewClient returns a Client on Stripe's SDK with our own http.Client: a transport whose
// connections are capped (never http.DefaultClient, whose unbounded connections and missing
// timeouts are exactly what a slow provider exploits), traced, and that never re-sends a
// request by itself (noResend). The SDK's own retries are off (MaxNetworkRetries 0): they
// would reuse the key under our retry layer's request budget, count no breaker failure, and
// sleep with time.Sleep, deaf to the caller's deadline. Its logging is off too: this
// package's callers log what they decide, and a library logging our requests is one more
// place a key or a customer's data could leak to.
func NewClient(cfg Config) (*Client, error) {
	base, err := url.Parse(cfg.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" || strings.TrimRight(base.Path, "/") != "" {
		return nil, fmt.Errorf("payment: base URL %q: want an absolute http or https URL without a path", cfg.BaseURL)
	}
	if cfg.SecretKey == "" {
		return nil, errors.New("payment: no secret key")
	}
	cfg = withDefaults(cfg)
	transport := newTransport(cfg)
	httpClient := &http.Client{
		Transport: traced(limitBody{noResend{transport}}),
		// A redirect of a create is a misconfigured base URL; following it would repost.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	baseURL := strings.TrimRight(cfg.BaseURL, "/")
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               &baseURL,
		HTTPClient:        httpClient,
		MaxNetworkRetries: stripe.Int64(0),
		EnableTelemetry:   stripe.Bool(false),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return &Client{sc: stripe.NewClient(cfg.SecretKey, stripe.WithBackends(backends)), transport: transport}, nil
}

// traced gives every request to the provider a client span ("POST /v1/payment_intents",
// ids left out of the name) and sends the W3C traceparent along. The span comes from the
// tracer provider of the caller's span — the server span of POST /orders, the worker's job
// span — so the client needs no provider of its own. A call without a caller's span goes to
// the transport directly: otelhttp's per-request work for a span nobody records was ~4 % of
// checkout's CPU under load (pprof).
func traced(rt http.RoundTripper) http.RoundTripper {
	return otelhttp.NewTransport(rt,
		otelhttp.WithFilter(func(r *http.Request) bool { return trace.SpanContextFromContext(r.Context()).IsValid() }),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + spanPath(r.URL.Path) }),
	)
}

// spanPath is a request's path without the object id a retrieve carries, so span names stay
// a handful.
func spanPath(p string) string {
	if rest, ok := strings.CutPrefix(p, "/v1/payment_intents/"); ok && rest != "" {
		return "/v1/payment_intents/{id}"
	}
	return p
}

// noResend keeps net/http from re-sending a request by itself. Its Transport re-sends a
// request carrying an Idempotency-Key when a reused keep-alive connection breaks before the
// answer, even after the request was written — provided it can rewind the body, which the
// SDK allows by setting GetBody. The first send may have charged; the caller would then see
// only the re-send's outcome, e.g. a dial error that looks like "nothing was sent". Without
// GetBody the Transport re-sends nothing it has begun to write, and every attempt is the
// resilience stack's decision, visible to it.
type noResend struct{ next http.RoundTripper }

func (t noResend) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.GetBody != nil {
		r = r.Clone(r.Context()) // a RoundTripper must not change its caller's request
		r.GetBody = nil
	}
	return t.next.RoundTrip(r)
}

// limitBody fails the read of a response body beyond maxResponseBytes, which the SDK would
// otherwise read whole, however large.
type limitBody struct{ next http.RoundTripper }

func (t limitBody) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		resp.Body = &limitedBody{ReadCloser: resp.Body}
	}
	return resp, err
}

// errBodyTooLarge: a response body over maxResponseBytes.
var errBodyTooLarge = fmt.Errorf("response body over %d bytes", maxResponseBytes)

type limitedBody struct {
	io.ReadCloser
	read int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if b.read > maxResponseBytes {
		return n, errBodyTooLarge
	}
	return n, err
}

// ConnectTimeout bounds how long a call takes to reach the provider over a new
// connection: the dial and the TLS handshake, with the defaults applied.
func (c Config) ConnectTimeout() time.Duration {
	c = withDefaults(c)
	return c.DialTimeout + c.TLSHandshakeTimeout
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
		// idle connections are closed by us, not under a request going out: requests are not
		// re-sent by the transport (see noResend), so that race would fail the attempt.
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   cfg.TLSHandshakeTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
	}
}

// CloseIdleConnections closes kept-alive connections to the provider, for shutdown.
func (c *Client) CloseIdleConnections() {
	c.transport.CloseIdleConnections() // the layers above do not pass the call on
}

// ChargeRequest asks for Amount minor units of Currency (ISO 4217, as orders store it) from
// PaymentMethod, for an order.
type ChargeRequest struct {
	OrderID       string
	Amount        int64
	Currency      string
	PaymentMethod string
}

// Receipt is a successful charge: a PaymentIntent that succeeded.
type Receipt struct {
	// ChargeID is the provider's id of the PaymentIntent, "pi_…"; the same on every replay.
	ChargeID string
	Amount   int64
	// Currency is upper case, as orders store it (Stripe writes it lower case).
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

// metadataOrderID is the metadata key under which a PaymentIntent names its order.
const metadataOrderID = "order_id"

// Charge creates and confirms a PaymentIntent for req (confirm=true: one request, so a
// charge costs one call of the provider's rate limit and one round trip) and returns the
// receipt. A failure is an *Error wrapped with the order id; classify it with errors.Is
// against ErrDeclined, ErrPermanent, ErrPending and ErrTransient. Charge makes one attempt,
// never re-sent by the SDK or the HTTP transport: retrying is the caller's decision, and is
// safe with the same key while the provider remembers it.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (Receipt, error) {
	receipt, err := c.charge(ctx, req)
	if err != nil {
		return Receipt{}, fmt.Errorf("charge order %s: %w", req.OrderID, err)
	}
	return receipt, nil
}

func (c *Client) charge(ctx context.Context, req ChargeRequest) (Receipt, error) {
	params := &stripe.PaymentIntentCreateParams{
		Amount:             stripe.Int64(req.Amount),
		Currency:           stripe.String(strings.ToLower(req.Currency)),
		PaymentMethod:      stripe.String(req.PaymentMethod),
		PaymentMethodTypes: []*string{stripe.String("card")},
		Confirm:            stripe.Bool(true),
	}
	params.AddMetadata(metadataOrderID, req.OrderID)
	// Without a key of ours the SDK would make up a random one per call, and a retry
	// would be a second charge.
	params.SetIdempotencyKey(IdempotencyKey(req.OrderID))
	pi, err := c.sc.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		return Receipt{}, classify(err)
	}
	return receiptOf(pi, req)
}

// receiptOf reads a 2xx PaymentIntent. Succeeded is a receipt; processing or requires_action
// is ErrPending, the third outcome; any other status is no answer to a confirmed create
// (transient: retrying with the same key replays the provider's real answer). A succeeded
// intent for another amount, currency or order is never taken as payment either, and it is
// no rejection of our request: the provider reports a charge, which a key collision or a
// provider bug put there, so the outcome is unknown (ReceiptMismatchError).
func receiptOf(pi *stripe.PaymentIntent, req ChargeRequest) (Receipt, error) {
	status := responseStatus(pi)
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
	case stripe.PaymentIntentStatusProcessing, stripe.PaymentIntentStatusRequiresAction:
		return Receipt{}, &Error{Kind: ErrPending, StatusCode: status, PaymentIntent: pi.ID, Code: string(pi.Status)}
	default:
		return Receipt{}, &Error{Kind: ErrTransient, StatusCode: status,
			Err: fmt.Errorf("unexpected PaymentIntent %q with status %q", pi.ID, pi.Status)}
	}
	got := Receipt{ChargeID: pi.ID, Amount: pi.Amount, Currency: strings.ToUpper(string(pi.Currency))}
	if pi.ID == "" || got.Amount != req.Amount || got.Currency != req.Currency || pi.Metadata[metadataOrderID] != req.OrderID {
		return Receipt{}, &Error{Kind: ErrTransient, StatusCode: status, Err: &ReceiptMismatchError{
			ChargeID:      pi.ID,
			WantAmount:    req.Amount,
			WantCurrency:  req.Currency,
			WantReference: req.OrderID,
			GotAmount:     got.Amount,
			GotCurrency:   got.Currency,
			GotReference:  pi.Metadata[metadataOrderID],
		}}
	}
	got.Replayed = pi.LastResponse != nil && pi.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	return got, nil
}

func responseStatus(pi *stripe.PaymentIntent) int {
	if pi.LastResponse == nil {
		return 0
	}
	return pi.LastResponse.StatusCode
}
