// Package auth verifies the bearer tokens of checkout's business routes
// (docs/design.md, "Authentication"): OpenID Connect access tokens, signed
// RS256 or ES256 by a key of the issuer's JWKS, for checkout's audience. It
// says who the customer is; internal/api turns its errors into 401 and 503
// answers, and internal/order scopes orders and Idempotency-Keys to that
// customer.
//
// The issuer is a dependency like the payment provider: its discovery
// document and JWKS are fetched through a resilience policy named
// "identity" (timeout, breaker), cached, refreshed in the background and on
// an unknown key id — at most once per MinRefetch — and kept while the
// issuer cannot be reached, so tokens signed by known keys keep working
// through an issuer outage.
package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// Name is the identity policy's name: its breaker and retry metrics are
// resilience's, labelled name="identity".
const Name = "identity"

// MaxSkew is the most clock skew between the issuer and checkout that
// token times are allowed (docs/design.md, "Authentication").
const MaxSkew = 60 * time.Second

// algorithms are the only signatures accepted: never "none", and never an
// HMAC, whose "secret" would be the issuer's public key.
var algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256}

// Config turns authentication on; an empty Issuer leaves it off.
type Config struct {
	Issuer   string // OpenID Connect issuer URL, exactly as tokens name it in iss
	Audience string // must be one of the token's aud
	// CustomerClaim names the claim holding the customer id; "sub" by default.
	CustomerClaim string
	// Refresh is how often the JWKS is fetched again in the background, so
	// a rotated-out key stops being accepted within Refresh.
	Refresh time.Duration
	// MinRefetch is the least time between two fetches of the JWKS: an
	// unknown key id fetches it at once unless one was fetched within
	// MinRefetch, so tokens with made-up key ids cannot flood the issuer.
	MinRefetch time.Duration
	// Resilience tunes the identity policy.
	Resilience resilience.Config
}

// DefaultConfig: a JWKS is small and changes rarely — providers rotate
// keys weekly or slower and publish a new key before they sign with it —
// so a 5-minute background refresh keeps a removed key usable for at most
// 5 minutes, and an unknown key id is looked up at most every 5 s.
//
// The policy is resilience's default with the timeouts of an issuer on the
// internet rather than of a provider next door (2 s per attempt, slow from
// 1.5 s) and a breaker that judges the last 4 calls, since the issuer is
// called a few times an hour, not per order.
func DefaultConfig() Config {
	r := resilience.DefaultConfig()
	r.AttemptTimeout = 2 * time.Second
	r.SlowCallThreshold = 1500 * time.Millisecond
	r.WindowSize, r.MinCalls = 4, 2
	r.OpenDuration = 5 * time.Second
	r.AbandonedHold = 0 // an issuer serves a static document; an abandoned fetch costs it nothing
	r.LimitInitial, r.LimitMin, r.LimitMax = 2, 2, 2
	return Config{CustomerClaim: "sub", Refresh: 5 * time.Minute, MinRefetch: 5 * time.Second, Resilience: r}
}

// Validate reports settings out of range, naming the field.
func (c Config) Validate() error {
	var errs []error
	if c.Audience == "" {
		errs = append(errs, errors.New("auth: Audience is required with an Issuer"))
	}
	if c.CustomerClaim == "" {
		errs = append(errs, errors.New("auth: CustomerClaim must not be empty"))
	}
	if c.Refresh < time.Second || c.MinRefetch <= 0 || c.MinRefetch > c.Refresh {
		errs = append(errs, fmt.Errorf("auth: want 0 < MinRefetch (%v) <= Refresh (%v), Refresh at least 1s", c.MinRefetch, c.Refresh))
	}
	return errors.Join(append(errs, c.Resilience.Validate())...)
}

// ErrInvalidToken: the token is not one of the issuer's for checkout (bad
// signature, algorithm, issuer, audience, times, or no customer): 401.
var ErrInvalidToken = errors.New("invalid token")

// UnavailableError: the token's key is not among the cached keys and the
// issuer cannot be asked for it now. The token may be good, so the answer
// is 503 with RetryAfter, never 401.
type UnavailableError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *UnavailableError) Error() string {
	return "token signing keys unavailable: " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Options carries what a Verifier needs besides settings.
type Options struct {
	Metrics    *Metrics            // nil keeps them unregistered
	Resilience *resilience.Metrics // the process's shared resilience metrics; nil keeps them unregistered
	Logger     *slog.Logger        // nil means slog.Default()
	// Client makes the calls to the issuer; nil means one with its own
	// transport (never http.DefaultClient).
	Client *http.Client
	// Now is the clock tokens are checked against; nil means time.Now.
	Now func() time.Time
}

// Verifier checks tokens. Its keys are fetched by Run, which must be
// running for tokens to verify.
type Verifier struct {
	cfg      Config
	keys     *keySet
	verifier *oidc.IDTokenVerifier
	now      func() time.Time
	metrics  *Metrics
}

// New builds a Verifier for cfg; it calls nothing: Run fetches the keys,
// so an issuer that is down at start does not stop checkout from starting.
func New(cfg Config, opts Options) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics, _ = NewMetrics(nil) // cannot fail without a registry
	}
	if opts.Client == nil {
		opts.Client = newClient()
	}
	policy, err := resilience.New(Name, cfg.Resilience, resilience.Options{Metrics: opts.Resilience, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	keys := newKeySet(cfg, policy, opts)
	now := opts.Now
	return &Verifier{
		cfg:  cfg,
		keys: keys,
		verifier: oidc.NewVerifier(cfg.Issuer, keys, &oidc.Config{
			ClientID:             cfg.Audience,
			SupportedSigningAlgs: []string{string(jose.RS256), string(jose.ES256)},
			// go-oidc rejects exp before Now with no leeway: MaxSkew earlier
			// is exp's leeway. nbf and iat are checked below, with the same
			// leeway, as go-oidc allows nbf 5 minutes.
			Now: func() time.Time { return now().Add(-MaxSkew) },
		}),
		now:     now,
		metrics: opts.Metrics,
	}, nil
}

// Run fetches the keys and keeps them fresh until ctx ends.
func (v *Verifier) Run(ctx context.Context) { v.keys.run(ctx) }

// Verify checks a raw token and returns its customer. The error is
// ErrInvalidToken (wrapped, with the reason) or an *UnavailableError.
func (v *Verifier) Verify(ctx context.Context, raw string) (string, error) {
	customer, err := v.verify(ctx, raw)
	var unavailable *UnavailableError
	switch {
	case err == nil:
		v.metrics.valid.Inc()
	case errors.As(err, &unavailable):
		v.metrics.unavailable.Inc()
	default:
		v.metrics.invalid.Inc()
	}
	return customer, err
}

func (v *Verifier) verify(ctx context.Context, raw string) (string, error) {
	ctx = withSlot(ctx)
	tok, err := v.verifier.Verify(ctx, raw)
	if err != nil {
		// go-oidc formats the key set's error with %v; the key set
		// remembers an unavailable answer on the request's context.
		if u := unavailableFrom(ctx); u != nil {
			return "", u
		}
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	var claims struct {
		NotBefore *jsonTime `json:"nbf"`
		IssuedAt  *jsonTime `json:"iat"`
	}
	if err := tok.Claims(&claims); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	latest := v.now().Add(MaxSkew)
	if claims.NotBefore != nil && time.Time(*claims.NotBefore).After(latest) {
		return "", fmt.Errorf("%w: not valid before %v", ErrInvalidToken, time.Time(*claims.NotBefore))
	}
	if claims.IssuedAt != nil && time.Time(*claims.IssuedAt).After(latest) {
		return "", fmt.Errorf("%w: issued in the future (%v)", ErrInvalidToken, time.Time(*claims.IssuedAt))
	}
	customer := tok.Subject
	if v.cfg.CustomerClaim != "sub" {
		var all map[string]any
		if err := tok.Claims(&all); err != nil {
			return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
		}
		customer, _ = all[v.cfg.CustomerClaim].(string)
	}
	if customer == "" {
		return "", fmt.Errorf("%w: no %s claim", ErrInvalidToken, v.cfg.CustomerClaim)
	}
	return customer, nil
}
