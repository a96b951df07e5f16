package envconfig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/resilience"
)

func TestResilienceLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    func(*resilience.Config) // edits the defaults into the expected Config
		wantErr []string                 // variables the error must name
	}{
		{name: "defaults", env: nil, want: func(*resilience.Config) {}},
		{
			name: "static",
			env:  map[string]string{"PAYMENT_LIMIT": "static", "PAYMENT_BULKHEAD_SIZE": "10"},
			want: func(c *resilience.Config) { c.LimitInitial, c.LimitMin, c.LimitMax = 10, 10, 10 },
		},
		{
			name: "adaptive knobs",
			env: map[string]string{
				"PAYMENT_LIMIT": "adaptive", "PAYMENT_LIMIT_INITIAL": "6", "PAYMENT_LIMIT_MIN": "2",
				"PAYMENT_LIMIT_MAX": "40", "PAYMENT_LIMIT_BACKOFF": "0.9",
			},
			want: func(c *resilience.Config) {
				c.LimitInitial, c.LimitMin, c.LimitMax, c.LimitBackoff = 6, 2, 40, 0.9
			},
		},
		{
			name: "bad values",
			env: map[string]string{
				"PAYMENT_LIMIT": "aimd", "PAYMENT_LIMIT_INITIAL": "four", "PAYMENT_LIMIT_MIN": "0",
				"PAYMENT_LIMIT_MAX": "-1", "PAYMENT_LIMIT_BACKOFF": "1",
			},
			wantErr: []string{"PAYMENT_LIMIT=", "PAYMENT_LIMIT_INITIAL", "PAYMENT_LIMIT_MIN", "PAYMENT_LIMIT_MAX", "PAYMENT_LIMIT_BACKOFF"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := envconfig.New(func(k string) string { return tt.env[k] })
			got := r.Resilience(resilience.DefaultConfig())
			err := r.Err()
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatal("Err() = nil, want an error")
				}
				for _, name := range tt.wantErr {
					if !strings.Contains(err.Error(), name) {
						t.Errorf("error %q does not name %s", err, name)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Err() = %v", err)
			}
			want := resilience.DefaultConfig()
			tt.want(&want)
			if got != want {
				t.Errorf("Resilience() = %+v, want %+v", got, want)
			}
		})
	}
}

// TestResilienceKeepsWhatTheEnvironmentDoesNotSet: with no variable set,
// Resilience returns its defaults whole — the worker's adjustments
// included, its Background role among them, which no variable sets.
func TestResilienceKeepsWhatTheEnvironmentDoesNotSet(t *testing.T) {
	t.Parallel()
	d := resilience.DefaultConfig()
	d.MinCalls, d.HalfOpenProbes, d.LimitInitial = 4, 1, 1
	d.BulkheadWait = 2 * time.Second
	d.Background = true
	r := envconfig.New(func(string) string { return "" })
	if got := r.Resilience(d); got != d {
		t.Errorf("Resilience() = %+v, want the defaults %+v", got, d)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
}
