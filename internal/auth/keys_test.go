package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
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

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "new", Algorithm: "ES256"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(signer).Claims(jwt.Claims{Subject: "cus_1", IssuedAt: jwt.NewNumericDate(issued)}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.VerifySignature(context.Background(), raw)
	if u, ok := errors.AsType[*UnavailableError](err); !ok || u.RetryAfter <= 0 {
		t.Errorf("unknown key, keys fetched in the token's second = %v; want an *UnavailableError with a Retry-After", err)
	}
	// A fetch after the token's second has passed settles it.
	k.lastAttempt, now = issued.Add(1500*time.Millisecond), issued.Add(1600*time.Millisecond)
	if _, err := k.VerifySignature(context.Background(), raw); err == nil || errors.As(err, new(*UnavailableError)) {
		t.Errorf("unknown key, keys fetched after the token's second = %v; want it refused", err)
	}
}
