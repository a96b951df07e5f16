package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/resilientcheckout/checkout/internal/sim/devissuer"
)

// TestAnUnknownKeyFetchedInTheTokensSecondIsNotRefused: a token names a
// key the cache lacks, and the keys were fetched moments ago — but in the
// same second as the token's iat, which has whole seconds only, so the
// key may have been published after that fetch. The token must get 503
// (ask again), not 401: the client did nothing wrong.
func TestAnUnknownKeyFetchedInTheTokensSecondIsNotRefused(t *testing.T) {
	t.Parallel()
	issued := time.Date(2026, 12, 1, 12, 0, 5, 0, time.UTC)
	now := issued.Add(900 * time.Millisecond)
	k := &keySet{cfg: Config{MinRefetch: 5 * time.Second}, now: func() time.Time { return now },
		healthy: true, lastAttempt: issued.Add(500 * time.Millisecond)}

	raw := forge(t, "new", jwt.Claims{Subject: "cus_1", IssuedAt: jwt.NewNumericDate(issued)})
	_, err := k.VerifySignature(context.Background(), raw)
	if u, ok := errors.AsType[*UnavailableError](err); !ok || u.RetryAfter <= 0 {
		t.Errorf("unknown key, keys fetched in the token's second = %v; want an *UnavailableError with a Retry-After", err)
	}
	// A fetch after the token's second has passed settles it.
	k.lastAttempt, now = issued.Add(1500*time.Millisecond), issued.Add(1600*time.Millisecond)
	if _, err := k.VerifySignature(context.Background(), raw); err == nil || errors.As(err, new(*UnavailableError)) {
		t.Errorf("unknown key, keys fetched after the token's second = %v; want it refused", err)
	}
}

// TestAnUnknownKeyIssuedInTheFutureIsRefused: within MinRefetch of the
// last fetch, a token of a key the cache lacks gets 503 only while that
// key may have been published since the fetch — never when its iat is
// later than now plus MaxSkew, which no token of the issuer's can be, or
// anyone could page the operator with made-up keys and future iats. The
// issuer is the development issuer over HTTP; the clock is injected.
func TestAnUnknownKeyIssuedInTheFutureIsRefused(t *testing.T) {
	t.Parallel()
	b := setupIssuer(t)
	if _, err := b.verifier.Verify(t.Context(), b.sign(t, b.claims(0))); err != nil {
		t.Fatalf("token of the published key = %v, want it accepted", err) // and the keys fetched
	}
	b.advance(time.Second) // within MinRefetch: an unknown kid does not fetch
	// The issuer's next key, published after the fetch: its tokens are
	// good, and checkout cannot know it yet.
	if err := b.issuer.Rotate(jose.ES256, true); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name            string
		token           string
		wantUnavailable bool
	}{
		{"made-up key, issued an hour ahead", forge(t, "made-up", b.claims(time.Hour)), false},
		{"made-up key, issued just beyond the leeway", forge(t, "made-up", b.claims(MaxSkew+time.Second)), false},
		{"new key, issued now", b.sign(t, b.claims(0)), true},
		{"new key, issued within the leeway ahead", b.sign(t, b.claims(MaxSkew)), true},
		// Indistinguishable from the new key's until the next fetch.
		{"made-up key, issued now", forge(t, "made-up", b.claims(0)), true},
	}
	for _, tt := range tests {
		before := testutil.ToFloat64(b.metrics.unavailable)
		_, err := b.verifier.Verify(t.Context(), tt.token)
		u, unavailable := errors.AsType[*UnavailableError](err)
		switch {
		case tt.wantUnavailable && (!unavailable || u.RetryAfter <= 0):
			t.Errorf("%s: Verify = %v; want an *UnavailableError with a Retry-After (503)", tt.name, err)
		case !tt.wantUnavailable && !errors.Is(err, ErrInvalidToken):
			t.Errorf("%s: Verify = %v; want ErrInvalidToken (401)", tt.name, err)
		}
		want := 0.0
		if tt.wantUnavailable {
			want = 1
		}
		if got := testutil.ToFloat64(b.metrics.unavailable) - before; got != want {
			t.Errorf("%s: auth_tokens_total{result=\"unavailable\"} rose by %v, want %v", tt.name, got, want)
		}
	}

	// Past MinRefetch the keys are fetched again: the 503 was honest.
	b.advance(DefaultConfig().MinRefetch)
	if _, err := b.verifier.Verify(t.Context(), b.sign(t, b.claims(0))); err != nil {
		t.Errorf("token of the new key after the next fetch = %v, want it accepted", err)
	}
}

// issuerBundle is a Verifier on an injected clock, against the development
// issuer over HTTP.
type issuerBundle struct {
	issuer   *devissuer.Issuer
	url      string
	verifier *Verifier
	metrics  *Metrics

	mu  sync.Mutex
	now time.Time
}

func setupIssuer(t *testing.T) *issuerBundle {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A whole second, so iat (whole seconds) is exactly the clock.
	b := &issuerBundle{url: "http://" + ln.Addr().String(), now: time.Now().Truncate(time.Second)}
	b.issuer, err = devissuer.New(devissuer.Config{Issuer: b.url, Audience: "checkout"})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: b.issuer.Handler()}}
	srv.Start()
	t.Cleanup(srv.Close)

	b.metrics, _ = NewMetrics(nil) // cannot fail without a registry
	cfg := DefaultConfig()
	cfg.Issuer, cfg.Audience = b.url, "checkout"
	// Run is not started: the first unknown kid fetches the keys, and no
	// background refresh races the steps of a test.
	b.verifier, err = New(cfg, Options{Metrics: b.metrics, Logger: slog.New(slog.DiscardHandler), Now: b.clock})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *issuerBundle) clock() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now
}

func (b *issuerBundle) advance(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now = b.now.Add(d)
}

// claims are a good token's, issued at the clock plus iat.
func (b *issuerBundle) claims(iat time.Duration) map[string]any {
	now := b.clock()
	return map[string]any{"iss": b.url, "aud": "checkout", "sub": "cus_1",
		"iat": now.Add(iat).Unix(), "exp": now.Add(iat + 10*time.Minute).Unix()}
}

// sign signs claims with the issuer's current key.
func (b *issuerBundle) sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	tok, err := b.issuer.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// forge signs claims with a key of its own, not the issuer's, under kid.
func forge(t *testing.T, kid string, claims any) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
