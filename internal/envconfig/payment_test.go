package envconfig_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/payment"
)

// TestPayment: the provider is Stripe unless STRIPE_API_BASE says otherwise; a key is
// required for an https provider, read from the environment or a file, must look like a
// Stripe secret key, and a live one never goes over plain http. A local provider on http gets
// the test key the simulators accept. No error repeats the key.
func TestPayment(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte("sk_live_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		env      map[string]string
		wantBase string
		wantKey  string
		wantErr  string // a substring; "" for none
	}{
		{name: "Stripe by default needs a key", env: nil, wantBase: payment.StripeAPIBase, wantErr: "STRIPE_SECRET_KEY not set"},
		{name: "Stripe with a test key", env: map[string]string{"STRIPE_SECRET_KEY": "sk_test_abc"}, wantBase: payment.StripeAPIBase, wantKey: "sk_test_abc"},
		{name: "a key from a file", env: map[string]string{"STRIPE_SECRET_KEY_FILE": file}, wantBase: payment.StripeAPIBase, wantKey: "sk_live_fromfile"},
		{name: "a restricted key", env: map[string]string{"STRIPE_SECRET_KEY": "rk_live_abc"}, wantBase: payment.StripeAPIBase, wantKey: "rk_live_abc"},
		{name: "the simulator on http", env: map[string]string{"STRIPE_API_BASE": "http://paymentsim:8082"}, wantBase: "http://paymentsim:8082", wantKey: envconfig.LocalSecretKey},
		{name: "a trailing slash", env: map[string]string{"STRIPE_API_BASE": "http://localhost:8082/"}, wantBase: "http://localhost:8082", wantKey: envconfig.LocalSecretKey},
		{name: "a publishable key", env: map[string]string{"STRIPE_SECRET_KEY": "pk_live_secretish"}, wantBase: payment.StripeAPIBase, wantErr: "want a Stripe secret key"},
		{name: "a live key over http", env: map[string]string{"STRIPE_API_BASE": "http://proxy:8080", "STRIPE_SECRET_KEY": "sk_live_secretish"},
			wantBase: "http://proxy:8080", wantErr: "plain http"},
		{name: "both sources", env: map[string]string{"STRIPE_SECRET_KEY": "sk_test_a", "STRIPE_SECRET_KEY_FILE": file}, wantBase: payment.StripeAPIBase, wantErr: "both set"},
		{name: "a missing file", env: map[string]string{"STRIPE_SECRET_KEY_FILE": file + ".none"}, wantBase: payment.StripeAPIBase, wantErr: "STRIPE_SECRET_KEY_FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := envconfig.New(func(k string) string { return tt.env[k] })
			cfg, err := r.Payment()
			if r.Err() != nil {
				t.Fatalf("reader error: %v", r.Err())
			}
			if cfg.BaseURL != tt.wantBase {
				t.Errorf("base URL %q, want %q", cfg.BaseURL, tt.wantBase)
			}
			if tt.wantErr == "" {
				if err != nil || cfg.SecretKey != tt.wantKey {
					t.Errorf("key %q, err %v; want %q", cfg.SecretKey, err, tt.wantKey)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "secretish") || strings.Contains(err.Error(), "fromfile") {
				t.Errorf("the error %q repeats the key", err)
			}
		})
	}
	for _, bad := range []string{"not a url", "ftp://x", "http://paymentsim:8082/v1"} {
		r := envconfig.New(func(k string) string { return map[string]string{"STRIPE_API_BASE": bad}[k] })
		if _, _ = r.Payment(); r.Err() == nil || !strings.Contains(r.Err().Error(), "STRIPE_API_BASE") {
			t.Errorf("STRIPE_API_BASE=%q: reader error %v, want one naming the variable", bad, r.Err())
		}
	}
}
