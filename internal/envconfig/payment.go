package envconfig

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/resilientcheckout/checkout/internal/payment"
)

// LocalSecretKey is the key sent to a provider on plain http when no STRIPE_SECRET_KEY is
// set: paymentsim (the demo's provider) and stripe-mock accept any test-mode key, and Stripe
// itself is only reachable over https, where a key must be set.
const LocalSecretKey = "sk_test_local"

// Payment reads the provider's settings, which checkout and the worker share:
// STRIPE_API_BASE (Stripe's API by default) and the secret key, STRIPE_SECRET_KEY or the
// file STRIPE_SECRET_KEY_FILE names (a mounted secret). The key is refused when missing
// for an https provider, when it is no Stripe secret key, or when a live key would travel
// over plain http; no error repeats it. Those key errors are returned apart from the
// Reader's, for the commands that call the provider to refuse to start with (serve), while
// the ones that do not (migrate, reconcile's report, breaker) run without a key.
func (r *Reader) Payment() (payment.Config, error) {
	cfg := payment.Config{BaseURL: strings.TrimRight(r.URL("STRIPE_API_BASE", payment.StripeAPIBase, "http", "https"), "/")}
	if u, err := url.Parse(cfg.BaseURL); err == nil && strings.Trim(u.Path, "/") != "" {
		r.errs = append(r.errs, errors.New("STRIPE_API_BASE: want the API's base URL without a path (the client adds /v1/…)"))
	}
	key, source, err := r.secretKey()
	switch {
	case err != nil:
	case key == "" && strings.HasPrefix(cfg.BaseURL, "http://"):
		key = LocalSecretKey
	case key == "" && source == "":
		err = fmt.Errorf("STRIPE_SECRET_KEY not set: STRIPE_API_BASE=%s needs a secret key (or STRIPE_SECRET_KEY_FILE)", cfg.BaseURL)
	case key == "":
		err = fmt.Errorf("%s: the key is empty", source)
	case !isSecretKey(key):
		err = fmt.Errorf("%s: want a Stripe secret key (sk_test_…, sk_live_…, or a restricted rk_…); the value is not shown", source)
	case strings.Contains(key, "_live_") && strings.HasPrefix(cfg.BaseURL, "http://"):
		err = fmt.Errorf("%s: a live key would travel over plain http to %s", source, cfg.BaseURL)
	}
	cfg.SecretKey = key
	return cfg, err
}

// secretKey returns the key and the variable it came from, "" when neither is set.
func (r *Reader) secretKey() (key, source string, err error) {
	inline, file := r.String("STRIPE_SECRET_KEY", ""), r.String("STRIPE_SECRET_KEY_FILE", "")
	switch {
	case inline != "" && file != "":
		return "", "", errors.New("STRIPE_SECRET_KEY and STRIPE_SECRET_KEY_FILE are both set: set one")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", "", fmt.Errorf("STRIPE_SECRET_KEY_FILE: %w", err)
		}
		return strings.TrimSpace(string(b)), "STRIPE_SECRET_KEY_FILE", nil
	case inline != "":
		return inline, "STRIPE_SECRET_KEY", nil
	}
	return "", "", nil
}

func isSecretKey(k string) bool {
	for _, p := range []string{"sk_test_", "sk_live_", "rk_test_", "rk_live_"} {
		if strings.HasPrefix(k, p) && len(k) > len(p) {
			return true
		}
	}
	return false
}
