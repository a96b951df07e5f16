package resilience

import (
	"strings"
	"testing"
	"time"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"", ModeProtected, false},
		{"protected", ModeProtected, false},
		{"timeout", ModeTimeout, false},
		{"none", ModeNone, false},
		{"Protected", 0, true},
		{"off", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseMode(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && tt.in != "" && got.String() != tt.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tt.in)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*Config)
		want string // "" for valid; otherwise the field the error must name
	}{
		{"defaults", func(*Config) {}, ""},
		{"no jitter, no bulkhead wait", func(c *Config) { c.OpenJitter, c.BulkheadWait = 0, 0 }, ""},
		{"unknown mode", func(c *Config) { c.Mode = 7 }, "Mode"},
		{"zero attempt timeout", func(c *Config) { c.AttemptTimeout = 0 }, "AttemptTimeout"},
		{"no attempts", func(c *Config) { c.MaxAttempts = 0 }, "MaxAttempts"},
		{"backoff cap below base", func(c *Config) { c.BackoffMax = time.Millisecond }, "BackoffMax"},
		{"empty window", func(c *Config) { c.WindowSize, c.MinCalls = 0, 0 }, "WindowSize"},
		{"min calls beyond window", func(c *Config) { c.MinCalls = 11 }, "MinCalls"},
		{"failure rate over 1", func(c *Config) { c.FailureRate = 50 }, "FailureRate"},
		{"zero slow rate", func(c *Config) { c.SlowCallRate = 0 }, "SlowCallRate"},
		{"a hold shorter than an attempt", func(c *Config) { c.AbandonedHold = 200 * time.Millisecond }, "AbandonedHold"},
		{"no hold", func(c *Config) { c.AbandonedHold = 0 }, ""},
		{"zero slow threshold", func(c *Config) { c.SlowCallThreshold = 0 }, "SlowCallThreshold"},
		{"zero open duration", func(c *Config) { c.OpenDuration = 0 }, "OpenDuration"},
		{"negative jitter", func(c *Config) { c.OpenJitter = -1 }, "OpenJitter"},
		{"no probes", func(c *Config) { c.HalfOpenProbes = 0 }, "HalfOpenProbes"},
		{"negative bulkhead wait", func(c *Config) { c.BulkheadWait = -time.Second }, "BulkheadWait"},
		{"zero limit floor", func(c *Config) { c.LimitMin, c.LimitInitial = 0, 0 }, "LimitMin"},
		{"limit max below min", func(c *Config) { c.LimitMin, c.LimitMax = 5, 4 }, "LimitMax"},
		{"initial limit above max", func(c *Config) { c.LimitInitial = 21 }, "LimitInitial"},
		{"initial limit below min", func(c *Config) { c.LimitMin = 5 }, "LimitInitial"},
		{"backoff of 1 never shrinks", func(c *Config) { c.LimitBackoff = 1 }, "LimitBackoff"},
		{"backoff below a half", func(c *Config) { c.LimitBackoff = 0.25 }, "LimitBackoff"},
		{"fixed adaptive limit", func(c *Config) { c.LimitMin, c.LimitInitial, c.LimitMax = 3, 3, 3 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want an error naming %s", err, tt.want)
			}
		})
	}
	if _, err := New("payment", Config{}, Options{}); err == nil {
		t.Error("New with a zero Config: err = nil, want the validation error")
	}
}

func TestMaxConcurrency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*Config)
		want int
	}{
		{"adaptive, held calls keeping their connections: twice its maximum", func(*Config) {}, 40},
		{"adaptive, no hold: its maximum", func(c *Config) { c.AbandonedHold = 0 }, 20},
		{"fixed, no hold: its size", func(c *Config) { c.LimitInitial, c.LimitMin, c.LimitMax, c.AbandonedHold = 4, 4, 4, 0 }, 4},
		{"mode timeout: unbounded", func(c *Config) { c.Mode = ModeTimeout }, 0},
		{"mode none: unbounded", func(c *Config) { c.Mode = ModeNone }, 0},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.edit(&cfg)
		if got := cfg.MaxConcurrency(); got != tt.want {
			t.Errorf("%s: MaxConcurrency() = %d, want %d", tt.name, got, tt.want)
		}
	}
}
