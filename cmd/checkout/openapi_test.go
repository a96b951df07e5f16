package main

// These tests hold api/openapi.yaml and the running service to each other:
// the spec must be a valid OpenAPI 3.1 document, and real requests sent
// through checkout's real wiring (run, Postgres, the payment simulator) must
// match it — requests the server accepts must be valid per the spec, requests
// it rejects as malformed or invalid must be invalid per the spec, and every
// response must match the spec's status, headers and body schema.
//
// kin-openapi (github.com/getkin/kin-openapi) validates both: it loads OpenAPI
// 3.1 and, for 3.1 documents, openapi3filter validates bodies with a JSON
// Schema 2020-12 validator, so keywords such as const, unevaluatedProperties
// and type arrays are enforced, not ignored.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/order"
	"github.com/resilientcheckout/checkout/internal/sim/catalogsim"
	"github.com/resilientcheckout/checkout/internal/sim/paymentsim/simtest"
)

const specPath = "../../api/openapi.yaml"

const (
	orderBody = `{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa",` +
		`"items":[{"sku":"SKU-1","quantity":2,"unit_price":1299},{"sku":"SKU-2","quantity":1,"unit_price":500}]}`
	declinedBody = `{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_chargeDeclined",` +
		`"items":[{"sku":"SKU-1","quantity":1,"unit_price":100}]}`
	otherBody = `{"customer_id":"cus_999","currency":"EUR","payment_method":"pm_card_visa",` +
		`"items":[{"sku":"SKU-9","quantity":1,"unit_price":100}]}`
	invalidBody = `{"customer_id":"","currency":"usd","payment_method":"pm_card_visa",` +
		`"items":[{"sku":"SKU-1","quantity":0,"unit_price":100000001}]}`
)

// startCheckout runs checkout's real wiring on a loopback port against the
// given database and provider, with extra settings on top.
func startCheckout(t *testing.T, dbURL, paymentURL string, extra map[string]string) *process.Process {
	t.Helper()
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "DATABASE_URL": dbURL, "STRIPE_API_BASE": paymentURL}
	maps.Copy(env, extra)
	return process.Start(t, run, []string{"checkout"}, env)
}

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specPath)
	if err != nil {
		t.Fatalf("load %s: %v", specPath, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", specPath, err)
	}
	return doc
}

func TestOpenAPISpecIsValid(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	if got, want := doc.OpenAPI, "3.1.0"; got != want {
		t.Errorf("openapi = %q, want %q", got, want)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Error("kin-openapi does not treat the document as OpenAPI 3.1")
	}

	// The currency list is a business rule kept in one place in code; the
	// spec repeats it, so it must repeat it exactly.
	var enum []string
	for _, v := range doc.Components.Schemas["PlaceOrderRequest"].Value.Properties["currency"].Value.Enum {
		enum = append(enum, fmt.Sprint(v))
	}
	if got, want := enum, order.Currencies; !slices.Equal(got, want) {
		t.Errorf("spec currencies = %q, want order.Currencies %q", got, want)
	}

	// Every route the server has is documented, and nothing else.
	var paths []string
	for p, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			paths = append(paths, method+" "+p)
		}
	}
	slices.Sort(paths)
	want := []string{"GET /health", "GET /metrics", "GET /orders/{id}", "GET /ready", "POST /orders"}
	if !slices.Equal(paths, want) {
		t.Errorf("documented operations = %q, want %q (internal/api/routes.go)", paths, want)
	}
}

// contract validates requests and responses against the spec.
type contract struct {
	router routers.Router
	base   string
	// authenticate checks a request against the spec's bearerAuth scheme.
	authenticate openapi3filter.AuthenticationFunc
}

func newContract(t *testing.T, baseURL string) *contract {
	t.Helper()
	doc := loadSpec(t)
	// The router matches the request URL against the servers list; the
	// process under test listens on a random port.
	doc.Servers = openapi3.Servers{{URL: baseURL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("router: %v", err)
	}
	// Checkout without AUTH_ISSUER needs no token, so by default the
	// spec's bearerAuth requirement is taken as met; requireBearer holds a
	// server with authentication on to it.
	return &contract{router: router, base: baseURL, authenticate: openapi3filter.NoopAuthenticationFunc}
}

// requireBearer makes the contract reject requests without a bearer token,
// as checkout with authentication on does. Whether the token is valid is
// the server's to say, not the spec's.
func (c *contract) requireBearer() *contract {
	c.authenticate = func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
		scheme, token, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || token == "" {
			return errors.New("no bearer token")
		}
		return nil
	}
	return c
}

// call is one request of a contract test.
type call struct {
	name    string
	method  string
	path    string
	headers map[string]string
	body    string
	// requestInvalid: the spec must reject this request, as the server does
	// (400, 413, 415, 422 invalid-order).
	requestInvalid bool
	wantStatus     int
	wantHeader     map[string]string // exact values of response headers
	wantType       string            // problem type, for problem responses
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (c *contract) check(t *testing.T, tc call) response {
	t.Helper()
	newRequest := func() *http.Request {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, c.base+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.headers {
			req.Header[http.CanonicalHeaderKey(k)] = []string{v}
		}
		return req
	}

	req := newRequest()
	route, pathParams, err := c.router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s: %s %s is not in the spec: %v", tc.name, tc.method, tc.path, err)
	}
	reqInput := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: pathParams, Route: route,
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: c.authenticate},
	}
	err = openapi3filter.ValidateRequest(t.Context(), reqInput)
	switch {
	case tc.requestInvalid && err == nil:
		t.Errorf("%s: the spec accepts a request the server rejects with %d", tc.name, tc.wantStatus)
	case !tc.requestInvalid && err != nil:
		t.Errorf("%s: request does not match the spec: %v", tc.name, err)
	}

	resp, err := http.DefaultClient.Do(newRequest())
	if err != nil {
		t.Fatalf("%s: %v", tc.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: read body: %v", tc.name, err)
	}
	if got, want := resp.StatusCode, tc.wantStatus; got != want {
		t.Fatalf("%s: status = %d, want %d; body %s", tc.name, got, want, body)
	}
	for k, want := range tc.wantHeader {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %s = %q, want %q", tc.name, k, got, want)
		}
	}
	if tc.wantType != "" && !bytes.Contains(body, []byte(`"type":"`+tc.wantType+`"`)) {
		t.Errorf("%s: body %s, want problem type %q", tc.name, body, tc.wantType)
	}

	err = openapi3filter.ValidateResponse(t.Context(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
	if err != nil {
		t.Errorf("%s: %d response does not match the spec: %v\nbody: %s", tc.name, resp.StatusCode, err, body)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func postOrder(name, key, body string) call {
	return call{
		name: name, method: http.MethodPost, path: "/orders", body: body,
		headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": key},
	}
}

func (c call) want(status int) call { c.wantStatus = status; return c }

func (c call) problem(typ string) call { c.wantType = typ; return c }

func (c call) invalid() call { c.requestInvalid = true; return c }

func (c call) header(kv ...string) call {
	c.wantHeader = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		c.wantHeader[kv[i]] = kv[i+1]
	}
	return c
}

func (c call) with(header, value string) call {
	h := map[string]string{}
	for k, v := range c.headers {
		h[k] = v
	}
	if value == "" {
		delete(h, header)
	} else {
		h[header] = value
	}
	c.headers = h
	return c
}

const urn = "urn:problem-type:checkout:"

// TestResponsesMatchOpenAPISpec runs the documented outcomes of every route
// through the real wiring, in protected mode.
func TestResponsesMatchOpenAPISpec(t *testing.T) {
	t.Parallel()
	sim := simtest.Start(t, 0)
	dbURL := dbtest.URL(t)
	p := startCheckout(t, dbURL, sim.URL, nil)
	c := newContract(t, p.URL)

	paidKey := uuid.NewString()
	paid := c.check(t, postOrder("201 paid", paidKey, orderBody).want(201).header("Idempotent-Replayed", ""))
	location := paid.header.Get("Location")
	c.check(t, postOrder("201 replayed", paidKey, orderBody).want(201).header("Idempotent-Replayed", "true", "Location", location))
	c.check(t, postOrder("201 replayed, quoted key", `"`+paidKey+`"`, orderBody).want(201).header("Idempotent-Replayed", "true"))
	c.check(t, postOrder("422 key reused with another body", paidKey, otherBody).want(422).problem(urn+"idempotency-key-reused"))
	c.check(t, call{name: "200 order", method: http.MethodGet, path: location}.want(200))

	declinedKey := uuid.NewString()
	c.check(t, postOrder("402 declined", declinedKey, declinedBody).want(402).problem(urn+"payment-failed"))
	c.check(t, postOrder("402 replayed", declinedKey, declinedBody).want(402).header("Idempotent-Replayed", "true"))

	bad := []call{
		postOrder("400 missing key", "", orderBody).with("Idempotency-Key", "").want(400).problem(urn + "invalid-idempotency-key"),
		postOrder("400 key of 256 chars", strings.Repeat("k", 256), orderBody).want(400).problem(urn + "invalid-idempotency-key"),
		postOrder("400 key with a space", "my key", orderBody).want(400).problem(urn + "invalid-idempotency-key"),
		postOrder("400 not JSON", uuid.NewString(), "customer_id=cus_123").want(400).problem(urn + "malformed-order"),
		postOrder("400 unknown field", uuid.NewString(), strings.Replace(orderBody, `{"customer_id"`, `{"coupon":"FREE","customer_id"`, 1)).want(400).problem(urn + "malformed-order"),
		postOrder("400 wrong JSON type", uuid.NewString(), strings.Replace(orderBody, `"quantity":2`, `"quantity":"2"`, 1)).want(400).problem(urn + "malformed-order"),
		postOrder("413 body over 1 MiB", uuid.NewString(), `{"customer_id":"`+strings.Repeat("a", 1<<20)+`"}`).want(413).problem("about:blank"),
		postOrder("415 text/plain", uuid.NewString(), orderBody).with("Content-Type", "text/plain").want(415).problem("about:blank"),
		postOrder("415 no Content-Type", uuid.NewString(), orderBody).with("Content-Type", "").want(415).problem("about:blank"),
		postOrder("422 invalid values", uuid.NewString(), invalidBody).want(422).problem(urn + "invalid-order"),
	}
	for _, tc := range bad {
		c.check(t, tc.invalid())
	}
	c.check(t, postOrder("201 with charset", uuid.NewString(), orderBody).with("Content-Type", "application/json; charset=utf-8").want(201))

	c.check(t, call{name: "404 unknown order", method: http.MethodGet, path: "/orders/" + uuid.NewString()}.want(404).problem("about:blank"))
	c.check(t, call{name: "404 not a UUID", method: http.MethodGet, path: "/orders/not-a-uuid"}.want(404).problem("about:blank"))
	c.check(t, call{name: "health", method: http.MethodGet, path: "/health"}.want(200))
	c.check(t, call{name: "ready", method: http.MethodGet, path: "/ready"}.want(200))
	c.check(t, call{name: "metrics", method: http.MethodGet, path: "/metrics"}.want(200))

	// 409: another request holds the key. Claiming it the way a request in
	// flight does (a locked row without a response) makes this deterministic.
	busyKey := uuid.NewString()
	var req order.PlaceRequest
	if err := json.Unmarshal([]byte(orderBody), &req); err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(t.Context(), `INSERT INTO idempotency_keys (key, request_fingerprint, locked_until) VALUES ($1, $2, now() + interval '1 hour')`,
		busyKey, req.Fingerprint()); err != nil {
		t.Fatal(err)
	}
	c.check(t, postOrder("409 key in use", busyKey, orderBody).want(409).problem(urn+"request-in-progress"))

	// The provider is down: protected mode falls back to 202 pending_payment.
	sim.Fault(t, `{"down":true}`)
	deferredKey := uuid.NewString()
	deferred := c.check(t, postOrder("202 provider down", deferredKey, orderBody).want(202))
	if !bytes.Contains(deferred.body, []byte(`"status":"pending_payment"`)) {
		t.Errorf("202 body %s, want status pending_payment", deferred.body)
	}
	c.check(t, postOrder("202 replayed", deferredKey, orderBody).want(202).header("Idempotent-Replayed", "true", "Location", deferred.header.Get("Location")))
	c.check(t, call{name: "200 pending order", method: http.MethodGet, path: deferred.header.Get("Location")}.want(200))
}

// TestUnavailableResponsesMatchOpenAPISpec: with the database unreachable,
// business routes answer the storage-unavailable 503 and /ready 503.
func TestUnavailableResponsesMatchOpenAPISpec(t *testing.T) {
	t.Parallel()
	p := startCheckout(t, "postgres://nobody@"+closedAddr(t)+"/none?sslmode=disable", "http://localhost:8082", nil)
	c := newContract(t, p.URL)
	c.check(t, postOrder("503 storage unavailable", uuid.NewString(), orderBody).want(503).problem(urn+"storage-unavailable"))
	c.check(t, call{name: "503 GET order", method: http.MethodGet, path: "/orders/" + uuid.NewString()}.want(503).problem(urn+"storage-unavailable"))
	c.check(t, call{name: "ready 503", method: http.MethodGet, path: "/ready"}.want(503))
	c.check(t, call{name: "health", method: http.MethodGet, path: "/health"}.want(200))
}

// TestUnprotectedModeResponsesMatchOpenAPISpec: without the fallback (mode
// timeout), a failing provider is a 502 and a hung one a 504.
func TestUnprotectedModeResponsesMatchOpenAPISpec(t *testing.T) {
	t.Parallel()
	sim := simtest.Start(t, 0)
	p := startCheckout(t, dbtest.URL(t), sim.URL, map[string]string{
		"RESILIENCE_MODE":         "timeout",
		"PAYMENT_ATTEMPT_TIMEOUT": "100ms",
	})
	c := newContract(t, p.URL)
	sim.Fault(t, `{"down":true}`)
	c.check(t, postOrder("502 provider down", uuid.NewString(), orderBody).want(502).problem(urn+"payment-unavailable"))
	sim.Heal(t)
	sim.Fault(t, `{"hang":true}`)
	c.check(t, postOrder("504 provider hangs", uuid.NewString(), orderBody).want(504).problem(urn+"payment-timeout"))
}

// TestContractCatchesDrift proves the response check can fail: bodies the
// server does not send, or no longer sends, are rejected by the spec.
func TestContractCatchesDrift(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	doc.Servers = openapi3.Servers{{URL: "http://checkout.test"}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	order := `{"id":"0190a6f5-8b5e-7c4e-9f00-3b1c2d4e5f60","status":"paid","customer_id":"cus_123","currency":"USD",` +
		`"items":[{"sku":"SKU-1","quantity":2,"unit_price":1299}],"total":2598,"charge_id":"ch_1",` +
		`"created_at":"2025-01-01T12:00:00Z","updated_at":"2025-01-01T12:00:00Z"}`
	tests := []struct {
		name, contentType, body string
		status                  int
		wantValid               bool
	}{
		{name: "the order as sent", status: 200, contentType: "application/json", body: order, wantValid: true},
		{name: "field renamed", status: 200, contentType: "application/json", body: strings.Replace(order, `"customer_id"`, `"customerId"`, 1)},
		{name: "field added", status: 200, contentType: "application/json", body: strings.Replace(order, `"total"`, `"payment_method":"pm_card_visa","total"`, 1)},
		{name: "unknown status", status: 200, contentType: "application/json", body: strings.Replace(order, `"paid"`, `"settled"`, 1)},
		{name: "money as a string", status: 200, contentType: "application/json", body: strings.Replace(order, `2598`, `"2598"`, 1)},
		{name: "problem instead of order", status: 200, contentType: "application/problem+json", body: `{"type":"about:blank","title":"OK","status":200}`},
		{name: "404 problem", status: 404, contentType: "application/problem+json", body: `{"type":"about:blank","title":"Not Found","status":404,"detail":"No order has this id."}`, wantValid: true},
		{name: "404 problem with an undocumented member", status: 404, contentType: "application/problem+json", body: `{"type":"about:blank","title":"Not Found","status":404,"trace":"x"}`},
		{name: "undocumented status", status: 418, contentType: "application/problem+json", body: `{"type":"about:blank","title":"I'm a teapot","status":418}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest(http.MethodGet, "http://checkout.test/orders/0190a6f5-8b5e-7c4e-9f00-3b1c2d4e5f60", nil)
			route, params, err := router.FindRoute(req)
			if err != nil {
				t.Fatal(err)
			}
			err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
				Status:                 tt.status,
				Header:                 http.Header{"Content-Type": {tt.contentType}},
				Body:                   io.NopCloser(strings.NewReader(tt.body)),
				Options:                &openapi3filter.Options{IncludeResponseStatus: true},
			})
			if got, want := err == nil, tt.wantValid; got != want {
				t.Errorf("valid = %v, want %v (error: %v)", got, want, err)
			}
		})
	}
}

// TestPriceCheckResponsesMatchOpenAPISpec: with CATALOG_URL set, the price
// check's answers — a changed price, an unknown SKU, stale prices while the
// catalog is down, and no usable price at all — are the documented ones.
func TestPriceCheckResponsesMatchOpenAPISpec(t *testing.T) {
	t.Parallel()
	sim := simtest.Start(t, 0)
	cat := httptest.NewServer(catalogsim.New(catalogsim.Config{}))
	t.Cleanup(cat.Close)
	p := startCheckout(t, dbtest.URL(t), sim.URL, map[string]string{"CATALOG_URL": cat.URL, "CATALOG_TTL": "1s"})
	c := newContract(t, p.URL)

	const (
		priced   = `{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-1","quantity":2,"unit_price":1299}]}`
		cheaper  = `{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-1","quantity":2,"unit_price":999}]}`
		unknown  = `{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-404","quantity":1,"unit_price":100}]}`
		uncached = `{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-3","quantity":1,"unit_price":2499}]}`
	)
	c.check(t, postOrder("201 at catalog prices", uuid.NewString(), priced).want(201))
	c.check(t, postOrder("409 price changed", uuid.NewString(), cheaper).want(409).problem(urn+"price-changed"))
	c.check(t, postOrder("422 unknown SKU", uuid.NewString(), unknown).want(422).problem(urn+"invalid-order"))

	req, _ := http.NewRequest(http.MethodPost, cat.URL+"/admin/faults", strings.NewReader(`{"down":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	time.Sleep(1100 * time.Millisecond) // CATALOG_TTL (1 s, the smallest allowed) passes: the cached price is stale
	stale := c.check(t, postOrder("201 from stale prices", uuid.NewString(), priced).want(201))
	if got := stale.header.Get("Catalog-Prices"); !strings.HasPrefix(got, "stale; age=") {
		t.Errorf("Catalog-Prices = %q, want stale; age=…", got)
	}
	c.check(t, postOrder("503 catalog unavailable", uuid.NewString(), uncached).want(503).problem(urn+"catalog-unavailable"))
}

// TestAuthResponsesMatchOpenAPISpec: with authentication on against the
// development issuer over HTTP, the answers the token check and the rate
// limit add (401, 403, 429 and the issuer's 503) are the documented ones.
func TestAuthResponsesMatchOpenAPISpec(t *testing.T) {
	t.Parallel()
	// A window of an hour: the quota cannot drain while the test runs.
	const limit = 8
	b := setupAuth(t, map[string]string{"RATE_LIMIT": strconv.Itoa(limit), "RATE_LIMIT_WINDOW": "1h"})
	c := newContract(t, b.url).requireBearer()
	as := func(cl call, token string) call { return cl.with("Authorization", "Bearer "+token) }
	getOrder := func(name, path string) call { return call{name: name, method: http.MethodGet, path: path} }
	alice, bob := b.token(t, "cus_alice"), b.token(t, "cus_bob")

	// The provider is unreachable (setupAuth), so orders are deferred.
	placed := c.check(t, as(postOrder("202 with a token", uuid.NewString(), authOrder("")), alice).want(202).
		header("RateLimit-Policy", `"per-client";q=8;w=3600`))
	if got := placed.header.Get("RateLimit"); !strings.HasPrefix(got, `"per-client";r=7;t=`) {
		t.Errorf("RateLimit = %q, want 7 of 8 requests left", got)
	}
	location := placed.header.Get("Location")
	c.check(t, as(getOrder("200 own order", location), alice).want(200))
	c.check(t, as(postOrder("403 another customer's name", uuid.NewString(), authOrder("cus_bob")), alice).want(403).problem(urn+"other-customer"))
	c.check(t, as(getOrder("404 another customer's order", location), bob).want(404).problem("about:blank"))

	c.check(t, postOrder("401 no token", uuid.NewString(), authOrder("")).want(401).problem(urn+"unauthenticated").
		header("WWW-Authenticate", `Bearer realm="checkout"`).invalid())
	c.check(t, getOrder("401 GET without a token", location).want(401).problem(urn+"unauthenticated").invalid())
	c.check(t, as(postOrder("401 invalid token", uuid.NewString(), authOrder("")), "not-a-jwt").want(401).problem(urn+"invalid-token").
		header("WWW-Authenticate", `Bearer realm="checkout", error="invalid_token"`))
	for _, path := range []string{"/health", "/ready", "/metrics"} {
		c.check(t, getOrder(path+" without a token", path).want(200))
	}

	// One customer spends its quota; the next request is refused. The
	// sketch may overcount, never undercount, so the refusal comes at the
	// limit or before it.
	busy := b.token(t, "cus_busy")
	for i := range limit + 1 {
		a := authCall(t, http.MethodGet, b.url+"/orders/"+uuid.NewString(), busy, "", "")
		if a.status == http.StatusTooManyRequests {
			break
		}
		if a.status != http.StatusNotFound || i == limit {
			t.Fatalf("request %d of cus_busy = %d, want 404 until the limit of %d, then 429", i+1, a.status, limit)
		}
	}
	c.check(t, as(getOrder("429 over the limit", "/orders/"+uuid.NewString()), busy).want(429).problem(urn+"rate-limited").
		header("Retry-After", "3600", "RateLimit-Policy", `"per-client";q=8;w=3600`))
	c.check(t, as(postOrder("429 POST over the limit", uuid.NewString(), authOrder("")), busy).want(429).problem(urn+"rate-limited"))
	c.check(t, as(getOrder("another customer is not limited", location), alice).want(200))

	// The issuer goes away and signs with a key checkout never saw: the
	// token can be neither accepted nor refused.
	b.issuerSrv.Close()
	if err := b.issuer.Rotate(jose.RS256, true); err != nil {
		t.Fatal(err)
	}
	c.check(t, as(postOrder("503 issuer unavailable", uuid.NewString(), authOrder("")), b.token(t, "cus_alice")).want(503).problem(urn+"identity-unavailable"))
}
