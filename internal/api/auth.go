package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/resilientcheckout/checkout/internal/auth"
)

// Authenticator checks a bearer token and names its customer;
// *auth.Verifier is checkout's. Its errors are auth.ErrInvalidToken (401)
// and *auth.UnavailableError (503).
type Authenticator interface {
	Verify(ctx context.Context, token string) (customer string, err error)
}

// realm names the protection space in WWW-Authenticate (RFC 6750, 3).
const challenge = `Bearer realm="checkout"`

// identity is what authenticate learnt about a request.
type identity struct {
	customer string
	err      error // errNoToken, or the Authenticator's
}

type identityKey struct{}

var errNoToken = errors.New("no bearer token")

// authenticate checks the request's bearer token and records the outcome
// for the layers after it, answering nothing itself: the rate limit comes
// first (keyed by the customer when the token is good), then
// requireCustomer answers the requests without one.
func authenticate(a Authenticator) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := identity{err: errNoToken}
			if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && token != "" {
				id.customer, id.err = a.Verify(r.Context(), strings.TrimSpace(token))
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
		})
	}
}

// requireCustomer answers a request without a valid token: 401 with the
// RFC 6750 challenge, or 503 when the token's key cannot be looked up now.
func requireCustomer(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, _ := r.Context().Value(identityKey{}).(identity)
			if id.err == nil && id.customer != "" {
				next.ServeHTTP(w, r)
				return
			}
			writeAuthError(w, r, log, id.err)
		})
	}
}

// customerOf returns the authenticated customer of the request, and false
// when authentication is off.
func customerOf(r *http.Request) (string, bool) {
	id, ok := r.Context().Value(identityKey{}).(identity)
	return id.customer, ok && id.err == nil
}

// writeAuthError maps authentication outcomes to answers, beside
// writeError's map of the domain's.
func writeAuthError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var unavailable *auth.UnavailableError
	switch {
	case errors.As(err, &unavailable):
		log.WarnContext(r.Context(), "token key unknown and the issuer's keys cannot be fetched", "err", err)
		w.Header().Set("Retry-After", seconds(unavailable.RetryAfter))
		writeProblem(w, newProblem(http.StatusServiceUnavailable, "identity-unavailable", "The token cannot be checked right now. Retry with the same token after Retry-After."))
	case errors.Is(err, errNoToken):
		w.Header().Set("WWW-Authenticate", challenge)
		writeProblem(w, newProblem(http.StatusUnauthorized, "unauthenticated", "Send a bearer token: Authorization: Bearer <token>."))
	default:
		annotate(r.Context(), slog.String("auth_error", err.Error()))
		w.Header().Set("WWW-Authenticate", challenge+`, error="invalid_token"`)
		writeProblem(w, newProblem(http.StatusUnauthorized, "invalid-token", "The bearer token is not valid for this service."))
	}
}
