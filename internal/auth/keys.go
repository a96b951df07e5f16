package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// maxDocumentBytes bounds a discovery document or JWKS read: real ones are
// a few KiB.
const maxDocumentBytes = 256 << 10

// newClient returns the issuer's HTTP client, with its own transport and
// timeouts (the policy's attempt timeout comes first) and no redirects: an
// issuer URL that redirects is a wrong AUTH_ISSUER, not something to follow.
func newClient() *http.Client {
	dialer := &net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxConnsPerHost:       2,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   2 * time.Second,
			ResponseHeaderTimeout: 10 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// keySet is the issuer's JWKS as go-oidc's oidc.KeySet: the keys last
// fetched, kept until a fetch succeeds again, so an issuer outage leaves
// tokens of known keys verifiable.
type keySet struct {
	cfg     Config
	policy  *resilience.Policy
	client  *http.Client
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time

	mu          sync.Mutex
	keys        []jose.JSONWebKey
	healthy     bool          // the latest fetch succeeded
	lastAttempt time.Time     // when the latest fetch began
	inflight    chan struct{} // closed when the fetch in flight ends; nil if none
	lastErr     error
}

func newKeySet(cfg Config, policy *resilience.Policy, opts Options) *keySet {
	return &keySet{cfg: cfg, policy: policy, client: opts.Client, log: opts.Logger, metrics: opts.Metrics, now: opts.Now}
}

// Reasons for a fetch, the values of identity_key_refreshes_total's reason.
const (
	reasonSchedule   = "schedule"    // the background refresh (and the first fetch)
	reasonUnknownKid = "unknown_kid" // a token named a key not in the cache
)

// run fetches the keys now and then every Refresh; while the issuer
// cannot be reached, every MinRefetch.
func (k *keySet) run(ctx context.Context) {
	for {
		next := k.cfg.Refresh
		if err := k.refresh(ctx, reasonSchedule); err != nil {
			k.log.WarnContext(ctx, "identity issuer keys could not be fetched; the cached keys stay in use", "err", err)
			next = k.cfg.MinRefetch
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// errThrottled: an unknown key id arrived within MinRefetch of the latest
// fetch, which is not repeated yet.
type errThrottled struct{ wait time.Duration }

func (e errThrottled) Error() string { return "keys fetched less than MinRefetch ago" }

// refresh fetches the keys, or waits for the fetch already in flight. An
// unknown key id does not fetch within MinRefetch of the latest fetch.
func (k *keySet) refresh(ctx context.Context, reason string) error {
	k.mu.Lock()
	if ch := k.inflight; ch != nil {
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.lastErr
	}
	if since := k.now().Sub(k.lastAttempt); reason == reasonUnknownKid && since < k.cfg.MinRefetch {
		k.mu.Unlock()
		return errThrottled{wait: k.cfg.MinRefetch - since}
	}
	ch := make(chan struct{})
	k.inflight, k.lastAttempt = ch, k.now()
	k.mu.Unlock()

	// Detached from the request that triggered it: others wait for it too.
	keys, err := k.fetch(context.WithoutCancel(ctx))
	result := "success"
	if err != nil {
		result = "failure"
	}
	k.metrics.refreshes.WithLabelValues(reason, result).Inc()

	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil {
		k.keys = keys
		k.metrics.keys.Set(float64(len(keys)))
	}
	k.healthy, k.lastErr, k.inflight = err == nil, err, nil
	close(ch)
	return err
}

// discovery is the part of the issuer's discovery document checkout needs.
type discovery struct {
	Issuer  string `json:"issuer"`
	JWKSURI string `json:"jwks_uri"`
}

// fetch reads the discovery document, then the JWKS it names, each call
// through the identity policy.
func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	var d discovery
	wellKnown := strings.TrimSuffix(k.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	if err := k.get(ctx, wellKnown, &d); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	// OpenID Connect Discovery 1.0, 4.3: the document must name the issuer
	// it was fetched for, or its keys are another issuer's.
	if d.Issuer != k.cfg.Issuer || d.JWKSURI == "" {
		return nil, fmt.Errorf("discovery: issuer %q with jwks_uri %q, want issuer %q and a jwks_uri", d.Issuer, d.JWKSURI, k.cfg.Issuer)
	}
	var set jose.JSONWebKeySet
	if err := k.get(ctx, d.JWKSURI, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, key := range set.Keys {
		if key.Use == "enc" || !key.IsPublic() || !key.Valid() {
			continue
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("jwks: no signing keys")
	}
	return keys, nil
}

func (k *keySet) get(ctx context.Context, url string, into any) error {
	start := time.Now()
	_, err := resilience.Do(ctx, k.policy, func(ctx context.Context) (struct{}, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return struct{}{}, err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := k.client.Do(req)
		if err != nil {
			return struct{}{}, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return struct{}{}, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes))
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, json.Unmarshal(body, into)
	})
	outcome := "success"
	if err != nil {
		outcome = "failure"
	}
	k.metrics.calls.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	return err
}

// VerifySignature is oidc.KeySet's: it checks the token's signature with
// the cached key its kid names, fetching the keys again for a kid not
// among them. Only RS256 and ES256 tokens are parsed at all.
func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, algorithms)
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("want exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	k.mu.Lock()
	keys := k.keys
	k.mu.Unlock()
	if payload, found, err := verifyWith(jws, kid, keys); found {
		return payload, err
	}

	err = k.refresh(ctx, reasonUnknownKid)
	var throttled errThrottled
	switch {
	case err == nil:
		k.mu.Lock()
		keys = k.keys
		k.mu.Unlock()
		if payload, found, err := verifyWith(jws, kid, keys); found {
			return payload, err
		}
		return nil, fmt.Errorf("no key %q in the issuer's JWKS", kid)
	case errors.As(err, &throttled):
		// Keys fetched successfully after the token was issued settle it:
		// its key is not the issuer's (or no longer). Otherwise the key
		// may have been published since, and the token may be good. The
		// unverified iat decides only between 401 and 503. It has whole
		// seconds, so "after" means after the end of its second: a fetch
		// in the same second may have come before the key was published.
		//
		// An iat later than now plus MaxSkew settles it too: the issuer we
		// trust did not sign it (Verify refuses such an iat whatever the
		// key), and no fetch would ever come after it, so made-up key ids
		// with future iats would otherwise always get 503 and page the
		// operator.
		iat := issuedAt(jws)
		if iat.After(k.now().Add(MaxSkew)) {
			return nil, fmt.Errorf("no key %q in the issuer's JWKS, and issued in the future (%v)", kid, iat)
		}
		k.mu.Lock()
		settled := k.healthy && k.lastAttempt.After(iat.Add(time.Second))
		k.mu.Unlock()
		if settled {
			return nil, fmt.Errorf("no key %q in the issuer's JWKS", kid)
		}
		return nil, k.unavailable(ctx, throttled.wait, fmt.Errorf("key %q unknown and the keys were fetched %v ago", kid, k.cfg.MinRefetch-throttled.wait))
	default:
		return nil, k.unavailable(ctx, max(k.policy.RetryAfter(), k.cfg.MinRefetch), err)
	}
}

// unavailable records an *UnavailableError for Verify, through which
// go-oidc passes errors as text only.
func (k *keySet) unavailable(ctx context.Context, retryAfter time.Duration, err error) error {
	u := &UnavailableError{RetryAfter: retryAfter, Err: err}
	if slot, ok := ctx.Value(slotKey{}).(*unavailableSlot); ok {
		slot.err = u
	}
	return u
}

type (
	slotKey         struct{}
	unavailableSlot struct{ err *UnavailableError }
)

func withSlot(ctx context.Context) context.Context {
	return context.WithValue(ctx, slotKey{}, &unavailableSlot{})
}

func unavailableFrom(ctx context.Context) *UnavailableError {
	if slot, ok := ctx.Value(slotKey{}).(*unavailableSlot); ok {
		return slot.err
	}
	return nil
}

// verifyWith checks jws with the keys kid names (every key when the token
// names none); found is false when no key qualifies.
func verifyWith(jws *jose.JSONWebSignature, kid string, keys []jose.JSONWebKey) (payload []byte, found bool, err error) {
	alg := jws.Signatures[0].Header.Algorithm
	err = errors.New("signature does not verify")
	for _, key := range keys {
		if (kid != "" && key.KeyID != kid) || (key.Algorithm != "" && key.Algorithm != alg) {
			continue
		}
		found = true
		if p, verr := jws.Verify(key); verr == nil {
			return p, true, nil
		}
	}
	return nil, found, err
}

// issuedAt is the token's unverified iat; the zero time without one.
func issuedAt(jws *jose.JSONWebSignature) time.Time {
	var c struct {
		IssuedAt *jsonTime `json:"iat"`
	}
	if json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &c) != nil || c.IssuedAt == nil {
		return time.Time{}
	}
	return time.Time(*c.IssuedAt)
}
