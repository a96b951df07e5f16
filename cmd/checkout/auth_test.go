package main

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
	"github.com/resilientcheckout/checkout/internal/lab/process"
	"github.com/resilientcheckout/checkout/internal/sim/devissuer"
)

// authBundle is checkout, run as main runs it, with authentication on
// against the development issuer over HTTP.
type authBundle struct {
	url       string
	issuer    *devissuer.Issuer
	issuerSrv *httptest.Server
	issuerURL string
}

func setupAuth(t *testing.T, extra map[string]string) *authBundle {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &authBundle{issuerURL: "http://" + ln.Addr().String()}
	b.issuer, err = devissuer.New(devissuer.Config{Issuer: b.issuerURL, Audience: "checkout"})
	if err != nil {
		t.Fatal(err)
	}
	b.issuerSrv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: b.issuer.Handler()}}
	b.issuerSrv.Start()
	t.Cleanup(b.issuerSrv.Close)
	env := map[string]string{
		"HTTP_ADDR":       "127.0.0.1:0",
		"DATABASE_URL":    dbtest.URL(t),
		"STRIPE_API_BASE": "http://" + closedAddr(t), // refused: orders are deferred (202)
		"AUTH_ISSUER":     b.issuerURL,
		"AUTH_AUDIENCE":   "checkout",
	}
	for k, v := range extra {
		env[k] = v
	}
	b.url = process.Start(t, run, []string{"checkout"}, env).URL
	return b
}

func (b *authBundle) token(t *testing.T, customer string) string {
	t.Helper()
	tok, err := b.issuer.Token(customer)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claims are a good token's, for the tests to spoil one at a time.
func (b *authBundle) claims(customer string) map[string]any {
	now := time.Now()
	return map[string]any{"iss": b.issuerURL, "aud": "checkout", "sub": customer,
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix()}
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
}

func authCall(t *testing.T, method, url, token, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func authOrder(customer string) string {
	c := ""
	if customer != "" {
		c = `"customer_id":"` + customer + `",`
	}
	return `{` + c + `"currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-1","quantity":1,"unit_price":1000}]}`
}

func placed(a answer) bool { return a.status == http.StatusCreated || a.status == http.StatusAccepted }

func TestAuthRefusesBadTokensWith401(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, nil)
	sign := func(mutate func(map[string]any)) string {
		c := b.claims("cus_1")
		mutate(c)
		tok, err := b.issuer.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := b.token(t, "cus_1")
	payload := strings.Split(good, ".")[1]
	enc := base64.RawURLEncoding.EncodeToString
	none := enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + payload + "."
	// HS256 keyed with the issuer's public key: the classic confusion
	// attack on verifiers that take the algorithm from the token.
	pub := b.issuer.JWKS().Keys[0]
	der, err := x509.MarshalPKIXPublicKey(pub.Key)
	if err != nil {
		t.Fatal(err)
	}
	hmacKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: hmacKey},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), pub.KeyID))
	if err != nil {
		t.Fatal(err)
	}
	hs256, err := jwt.Signed(signer).Claims(b.claims("cus_1")).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	sig := []byte(good[strings.LastIndex(good, ".")+1:])
	sig[0] ^= 1 // flips the signature's first bits
	badSignature := good[:strings.LastIndex(good, ".")+1] + string(sig)

	tests := []struct{ name, token string }{
		{"expired", sign(func(c map[string]any) { c["exp"] = time.Now().Add(-2 * time.Minute).Unix() })},
		{"no exp", sign(func(c map[string]any) { delete(c, "exp") })},
		{"not yet valid", sign(func(c map[string]any) { c["nbf"] = time.Now().Add(2 * time.Minute).Unix() })},
		{"issued in the future", sign(func(c map[string]any) { c["iat"] = time.Now().Add(2 * time.Minute).Unix() })},
		{"wrong audience", sign(func(c map[string]any) { c["aud"] = "another-service" })},
		{"wrong issuer", sign(func(c map[string]any) { c["iss"] = "http://issuer.example" })},
		{"no subject", sign(func(c map[string]any) { delete(c, "sub") })},
		{"bad signature", badSignature},
		{"alg none", none},
		{"HS256 with the public key", hs256},
		{"not a JWT", "hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := authCall(t, http.MethodPost, b.url+"/orders", tt.token, "k-"+strings.ReplaceAll(tt.name, " ", "-"), authOrder(""))
			if a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") != `Bearer realm="checkout", error="invalid_token"` ||
				a.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("POST /orders = %d, WWW-Authenticate %q, %s; want a 401 problem with error=\"invalid_token\"",
					a.status, a.header.Get("WWW-Authenticate"), a.header.Get("Content-Type"))
			}
		})
	}
	a := authCall(t, http.MethodPost, b.url+"/orders", "", "k-none", authOrder(""))
	if a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") != `Bearer realm="checkout"` {
		t.Errorf("no token: %d, WWW-Authenticate %q; want 401 with the bare challenge", a.status, a.header.Get("WWW-Authenticate"))
	}
	if a := authCall(t, http.MethodGet, b.url+"/orders/0190a8c2-0000-7000-8000-000000000000", "", "", ""); a.status != http.StatusUnauthorized {
		t.Errorf("GET /orders/{id} without a token = %d, want 401", a.status)
	}
	if a := authCall(t, http.MethodPost, b.url+"/orders", good, "k-good", authOrder("")); !placed(a) {
		t.Errorf("good token = %d %v, want 201 or 202", a.status, a.body)
	}
	for _, path := range []string{"/health", "/ready", "/metrics"} {
		if got := get(t, b.url+path); got != http.StatusOK {
			t.Errorf("GET %s without a token = %d, want 200", path, got)
		}
	}
}

func TestAuthScopesOrdersAndKeysToTheCustomer(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, nil)
	alice, bob := b.token(t, "cus_alice"), b.token(t, "cus_bob")

	if a := authCall(t, http.MethodPost, b.url+"/orders", alice, "k-other", authOrder("cus_bob")); a.status != http.StatusForbidden {
		t.Errorf("alice placing in bob's name = %d, want 403", a.status)
	}
	// The key is unique across customers while the schema keeps the
	// previous release's uniqueness on the key alone (docs/operations.md,
	// "Writing a migration: expand, then contract"): bob's request under
	// alice's key is refused and shown nothing of hers.
	keys := map[string]string{"cus_alice": "shared-key", "cus_bob": "bobs-key"}
	first := map[string]answer{}
	a := authCall(t, http.MethodPost, b.url+"/orders", alice, "shared-key", authOrder(""))
	if !placed(a) || a.body["customer_id"] != "cus_alice" {
		t.Fatalf("alice: POST /orders = %d %v, want 201/202 for her", a.status, a.body)
	}
	first["cus_alice"] = a
	if a := authCall(t, http.MethodPost, b.url+"/orders", bob, "shared-key", authOrder("")); a.status != http.StatusUnprocessableEntity || a.body["id"] != nil {
		t.Errorf("bob under alice's key: POST /orders = %d %v, want 422 and no order", a.status, a.body)
	}
	if a = authCall(t, http.MethodPost, b.url+"/orders", bob, "bobs-key", authOrder("")); !placed(a) || a.body["customer_id"] != "cus_bob" {
		t.Fatalf("bob: POST /orders = %d %v, want 201/202 for him", a.status, a.body)
	}
	first["cus_bob"] = a
	for name, tok := range map[string]string{"cus_alice": alice, "cus_bob": bob} {
		a := authCall(t, http.MethodPost, b.url+"/orders", tok, keys[name], authOrder(name))
		if a.header.Get("Idempotent-Replayed") != "true" || a.body["id"] != first[name].body["id"] {
			t.Errorf("%s's retry = %d %v (replayed %q), want the replay of %v", name, a.status, a.body["id"], a.header.Get("Idempotent-Replayed"), first[name].body["id"])
		}
	}
	aliceOrder := first["cus_alice"].header.Get("Location")
	if a := authCall(t, http.MethodGet, b.url+aliceOrder, alice, "", ""); a.status != http.StatusOK {
		t.Errorf("alice GET her order = %d, want 200", a.status)
	}
	if a := authCall(t, http.MethodGet, b.url+aliceOrder, bob, "", ""); a.status != http.StatusNotFound {
		t.Errorf("bob GET alice's order = %d, want 404, as for an unknown id", a.status)
	}
}

func TestAuthFollowsKeyRotationAndSurvivesAnIssuerOutage(t *testing.T) {
	t.Parallel()
	b := setupAuth(t, map[string]string{"AUTH_KEYS_REFRESH": "1s"})
	old := b.token(t, "cus_1")
	if a := authCall(t, http.MethodPost, b.url+"/orders", old, "k-1", authOrder("")); !placed(a) {
		t.Fatalf("first token = %d %v, want 201 or 202", a.status, a.body)
	}
	// A rotation that withdraws the old key: new tokens are accepted
	// within one refresh, the old key's are refused from then on.
	if err := b.issuer.Rotate(jose.ES256, false); err != nil {
		t.Fatal(err)
	}
	rotated := b.token(t, "cus_1")
	deadline := time.Now().Add(3 * time.Second) // the refresh is 1 s
	var a answer
	for time.Now().Before(deadline) {
		if a = authCall(t, http.MethodPost, b.url+"/orders", rotated, "k-2", authOrder("")); placed(a) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !placed(a) {
		t.Fatalf("token of the new key = %d %v after %v, want accepted within one refresh", a.status, a.body, 3*time.Second)
	}
	time.Sleep(1500 * time.Millisecond) // a background refresh has run since
	if a := authCall(t, http.MethodPost, b.url+"/orders", old, "k-3", authOrder("")); a.status != http.StatusUnauthorized {
		t.Errorf("token of the withdrawn key = %d, want 401", a.status)
	}

	// The issuer goes away: tokens of the cached key still work; a token
	// of a key checkout never saw cannot be checked, so it gets 503.
	b.issuerSrv.Close()
	known := b.token(t, "cus_1")
	if a := authCall(t, http.MethodPost, b.url+"/orders", known, "k-4", authOrder("")); !placed(a) {
		t.Errorf("known key, issuer down = %d %v, want 201 or 202", a.status, a.body)
	}
	if err := b.issuer.Rotate(jose.RS256, true); err != nil {
		t.Fatal(err)
	}
	unknown := b.token(t, "cus_1")
	a = authCall(t, http.MethodPost, b.url+"/orders", unknown, "k-5", authOrder(""))
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Errorf("unknown key, issuer down = %d (Retry-After %q), want 503 with Retry-After", a.status, a.header.Get("Retry-After"))
	}
	for _, path := range []string{"/health", "/ready"} {
		if got := get(t, b.url+path); got != http.StatusOK {
			t.Errorf("GET %s with the issuer down = %d, want 200", path, got)
		}
	}
}
