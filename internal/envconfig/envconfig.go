// Package envconfig reads typed settings from environment variables, the
// only configuration source of the binaries (12-factor). Each binary parses
// all its variables in one place with a Reader; every bad value is collected
// and reported together, each error naming its variable, so a misconfigured
// process fails at start instead of misbehaving later.
//
// Domain packages never read the environment: cmd/*/config.go maps each
// binary's variables onto the Config structs of the packages it wires. The
// two groups that checkout and the worker both read under the same names —
// the database's (database.go) and the payment protection stack's
// (resilience.go) — are mapped here once, so the binaries cannot drift apart
// in names, ranges or defaults.
package envconfig

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Reader looks variables up through getenv (os.Getenv in main, a map in
// tests) and accumulates errors.
type Reader struct {
	getenv func(string) string
	errs   []error
}

// New returns a Reader over getenv.
func New(getenv func(string) string) *Reader { return &Reader{getenv: getenv} }

// Err reports every invalid variable seen so far.
func (r *Reader) Err() error { return errors.Join(r.errs...) }

func (r *Reader) fail(name, value, want string) {
	r.errs = append(r.errs, fmt.Errorf("%s=%q: %s", name, value, want))
}

// lookup returns the trimmed value, or "" when unset or blank.
func (r *Reader) lookup(name string) string { return strings.TrimSpace(r.getenv(name)) }

// String returns the value, or def when unset.
func (r *Reader) String(name, def string) string {
	if v := r.lookup(name); v != "" {
		return v
	}
	return def
}

// Int returns the value as an integer in [lo, hi], or def when unset.
func (r *Reader) Int(name string, def, lo, hi int) int {
	v := r.lookup(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.fail(name, v, fmt.Sprintf("want an integer from %d to %d", lo, hi))
		return def
	}
	return n
}

// Float returns the value as a number in [lo, hi], or def when unset.
func (r *Reader) Float(name string, def, lo, hi float64) float64 {
	v := r.lookup(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < lo || f > hi {
		r.fail(name, v, fmt.Sprintf("want a number from %g to %g", lo, hi))
		return def
	}
	return f
}

// Duration returns the value as a Go duration ("500ms", "2s") in [lo, hi],
// or def when unset.
func (r *Reader) Duration(name string, def, lo, hi time.Duration) time.Duration {
	v := r.lookup(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		r.fail(name, v, fmt.Sprintf("want a duration from %s to %s, like 500ms", lo, hi))
		return def
	}
	return d
}

// OneOf returns the value if it is one of allowed, or def when unset.
func (r *Reader) OneOf(name, def string, allowed ...string) string {
	v := r.lookup(name)
	if v == "" {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.fail(name, v, "want one of "+strings.Join(allowed, ", "))
	return def
}

// URL returns the value if it parses as an absolute URL with one of the
// given schemes, or def when unset. The value is not echoed in the error
// because database URLs carry passwords.
func (r *Reader) URL(name, def string, schemes ...string) string {
	v := r.lookup(name)
	if v == "" {
		v = def
	}
	u, err := url.Parse(v)
	if err == nil && u.Host != "" {
		for _, s := range schemes {
			if u.Scheme == s {
				return v
			}
		}
	}
	r.errs = append(r.errs, fmt.Errorf("%s: want an absolute %s URL", name, strings.Join(schemes, " or ")))
	return def
}

// Addr returns a listen address of the form "host:port" (host optional).
func (r *Reader) Addr(name, def string) string {
	v := r.String(name, def)
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		r.fail(name, v, "want host:port, like :8080")
		return def
	}
	if port, err := strconv.Atoi(v[i+1:]); err != nil || port < 0 || port > 65535 {
		r.fail(name, v, "want host:port, like :8080")
		return def
	}
	return v
}

// OptionalAddr is Addr for a listener that is off unless the variable is
// set: it returns "" when unset.
func (r *Reader) OptionalAddr(name string) string {
	if r.lookup(name) == "" {
		return ""
	}
	return r.Addr(name, "")
}

// OptionalURL is URL for a dependency that is off unless the variable is
// set: it returns "" when unset.
func (r *Reader) OptionalURL(name string, schemes ...string) string {
	if r.lookup(name) == "" {
		return ""
	}
	return r.URL(name, "", schemes...)
}
