package envconfig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/envconfig"
)

func TestReader(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"N": "7", "BAD_N": "seven", "BIG_N": "99",
		"D": "250ms", "BAD_D": "5", "F": "0.5",
		"MODE": "timeout", "BAD_MODE": "fast",
		"DB": "postgres://u:secret@db:5432/app", "BAD_DB": "secret-in-here",
		"ADDR": ":0", "BAD_ADDR": "8080",
	}
	r := envconfig.New(func(k string) string { return env[k] })

	if got, want := r.Int("N", 1, 0, 10), 7; got != want {
		t.Errorf("Int = %d, want %d", got, want)
	}
	if got, want := r.Int("UNSET", 3, 0, 10), 3; got != want {
		t.Errorf("Int(unset) = %d, want default %d", got, want)
	}
	if got, want := r.Duration("D", time.Second, 0, time.Minute), 250*time.Millisecond; got != want {
		t.Errorf("Duration = %v, want %v", got, want)
	}
	if got, want := r.Float("F", 0, 0, 1), 0.5; got != want {
		t.Errorf("Float = %v, want %v", got, want)
	}
	if got, want := r.OneOf("MODE", "protected", "none", "timeout", "protected"), "timeout"; got != want {
		t.Errorf("OneOf = %q, want %q", got, want)
	}
	if got, want := r.URL("DB", "", "postgres"), env["DB"]; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	if got, want := r.Addr("ADDR", ":8080"), ":0"; got != want {
		t.Errorf("Addr = %q, want %q", got, want)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("Err() = %v, want nil for valid values", err)
	}

	r.Int("BAD_N", 1, 0, 10)
	r.Int("BIG_N", 1, 0, 10)
	r.Duration("BAD_D", time.Second, 0, time.Minute)
	r.OneOf("BAD_MODE", "protected", "none", "protected")
	r.URL("BAD_DB", "", "postgres")
	r.Addr("BAD_ADDR", ":8080")
	err := r.Err()
	if err == nil {
		t.Fatal("Err() = nil, want every bad variable reported")
	}
	for _, name := range []string{"BAD_N", "BIG_N", "BAD_D", "BAD_MODE", "BAD_DB", "BAD_ADDR"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q leaks a URL value", err)
	}
}
