// Package devissuer is a development OpenID Connect issuer, NOT an identity
// provider: it signs a token for whichever customer anyone asks for, with
// no login at all. It stands in for the real issuer (docs/design.md,
// "Authentication") in the compose demo, `make run` and tests, the way
// the simulators stand in for the payment provider and the catalog: it
// serves a discovery document, a JWKS, a token endpoint, and an admin call
// that rotates the signing key.
package devissuer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/uuid"

	"github.com/resilientcheckout/checkout/internal/health"
)

// Config is the issuer's identity and the tokens it makes.
type Config struct {
	// Issuer is this issuer's URL as clients reach it, the iss of its
	// tokens: checkout's AUTH_ISSUER must be the same string.
	Issuer   string
	Audience string        // the aud of its tokens: checkout's AUTH_AUDIENCE
	TokenTTL time.Duration // how long a token is valid
}

// DefaultTokenTTL is long enough to follow the README walkthrough with one
// token, short enough that a token copied into a chat is soon worthless.
const DefaultTokenTTL = 10 * time.Minute

// Issuer signs tokens with its current key and publishes its current and
// previous keys, as a real issuer does around a rotation.
type Issuer struct {
	cfg Config

	mu       sync.Mutex
	current  signingKey
	previous []signingKey
}

type signingKey struct {
	id  string
	alg jose.SignatureAlgorithm
	key crypto.Signer
}

// New returns an issuer with a fresh RS256 key.
func New(cfg Config) (*Issuer, error) {
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("devissuer: Issuer and Audience are required")
	}
	i := &Issuer{cfg: cfg}
	if err := i.Rotate(jose.RS256, true); err != nil {
		return nil, err
	}
	return i, nil
}

// Rotate makes a new key of alg (RS256 or ES256) the signing key. With
// keep, the old key stays in the JWKS (a graceful rotation: its tokens stay
// valid); without, every old key is withdrawn at once.
func (i *Issuer) Rotate(alg jose.SignatureAlgorithm, keep bool) error {
	var (
		key crypto.Signer
		err error
	)
	switch alg {
	case jose.RS256:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		return fmt.Errorf("devissuer: algorithm %q: want RS256 or ES256", alg)
	}
	if err != nil {
		return fmt.Errorf("devissuer: generate key: %w", err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.current.key != nil && keep {
		i.previous = append([]signingKey{i.current}, i.previous...)[:min(len(i.previous)+1, 2)]
	} else {
		i.previous = nil
	}
	i.current = signingKey{id: uuid.NewString(), alg: alg, key: key}
	return nil
}

// KeyID is the id of the current signing key.
func (i *Issuer) KeyID() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.current.id
}

// Token signs a token for customer, valid for TokenTTL from now.
func (i *Issuer) Token(customer string) (string, error) {
	now := time.Now()
	return i.Sign(map[string]any{
		"iss": i.cfg.Issuer, "aud": i.cfg.Audience, "sub": customer,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(i.cfg.TokenTTL).Unix(),
		"jti": uuid.NewString(),
	})
}

// Sign signs any claims with the current key: tests make expired or
// misaddressed tokens with it.
func (i *Issuer) Sign(claims map[string]any) (string, error) {
	i.mu.Lock()
	k := i.current
	i.mu.Unlock()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), k.id))
	if err != nil {
		return "", fmt.Errorf("devissuer: signer: %w", err)
	}
	return jwt.Signed(signer).Claims(claims).Serialize()
}

// JWKS is the public keys, current first.
func (i *Issuer) JWKS() jose.JSONWebKeySet {
	i.mu.Lock()
	defer i.mu.Unlock()
	var set jose.JSONWebKeySet
	for _, k := range append([]signingKey{i.current}, i.previous...) {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.key.Public(), KeyID: k.id, Algorithm: string(k.alg), Use: "sig"})
	}
	return set
}

// Handler serves the issuer:
//
//	GET  /.well-known/openid-configuration  discovery
//	GET  /jwks                              the public keys
//	POST /token  (form customer=cus_123)    {"access_token": …, "token_type": "Bearer", "expires_in": …}
//	GET  /token?customer=cus_123            the same, for curl
//	POST /admin/rotate?alg=ES256&keep=false  a new signing key
//	GET  /health                            liveness, for the container healthcheck
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /health", health.Liveness())
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"issuer":                                i.cfg.Issuer,
			"jwks_uri":                              i.cfg.Issuer + "/jwks",
			"token_endpoint":                        i.cfg.Issuer + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
			"response_types_supported":              []string{"token"},
			"subject_types_supported":               []string{"public"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, i.JWKS())
	})
	token := func(w http.ResponseWriter, r *http.Request) {
		customer := r.FormValue("customer")
		if customer == "" || len(customer) > 64 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request", "error_description": "customer: 1 to 64 characters"})
			return
		}
		tok, err := i.Token(customer)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error"})
			return
		}
		w.Header().Set("Cache-Control", "no-store") // RFC 6749, 5.1
		writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(i.cfg.TokenTTL.Seconds())})
	}
	mux.HandleFunc("POST /token", token)
	mux.HandleFunc("GET /token", token)
	mux.HandleFunc("POST /admin/rotate", func(w http.ResponseWriter, r *http.Request) {
		alg := jose.SignatureAlgorithm(r.URL.Query().Get("alg"))
		if alg == "" {
			alg = jose.RS256
		}
		if err := i.Rotate(alg, r.URL.Query().Get("keep") != "false"); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"kid": i.KeyID()})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v) // cannot fail: strings, numbers and keys
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
