package catalog

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// errDown is the fake catalog's outage: a transient error, as a 503 is.
var errDown = errors.New("catalog: status 503")

// fakeCatalog is the catalog at the process edge for tests that run inside
// synctest bubbles, where its delay costs no real time. Tests of the real
// client and of the outage over HTTP use internal/sim/catalogsim instead.
type fakeCatalog struct {
	mu     sync.Mutex
	prices map[string]Price
	err    error         // returned by every call while set
	delay  time.Duration // before answering
	panics bool
	calls  [][]string
}

func (f *fakeCatalog) fetch(ctx context.Context, skus []string) (Quote, error) {
	f.mu.Lock()
	f.calls = append(f.calls, slices.Clone(skus))
	err, delay, panics := f.err, f.delay, f.panics
	prices := f.prices
	f.mu.Unlock()
	if panics {
		panic("fake catalog bug")
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return Quote{}, ctx.Err()
		}
	}
	if err != nil {
		return Quote{}, err
	}
	q := Quote{Prices: map[string]Price{}}
	for _, sku := range skus {
		if p, ok := prices[sku]; ok {
			q.Prices[sku] = p
		} else {
			q.Unknown = append(q.Unknown, sku)
		}
	}
	return q, nil
}

func (f *fakeCatalog) set(fn func(f *fakeCatalog)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeCatalog) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// bundle is a Service in front of a fake catalog.
type bundle struct {
	svc *Service
	cat *fakeCatalog
	cfg Config
}

// setup builds a Service with the default config (changed by edit, if
// given) around a fake catalog holding SKU-1 and SKU-2. The policy draws
// no jitter, so open durations and backoffs are exact.
func setup(t testing.TB, edit func(*Config)) *bundle {
	t.Helper()
	cfg := DefaultConfig()
	cfg.URL = "http://catalog.invalid"
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	policy, err := resilience.New(Name, cfg.Resilience, resilience.Options{
		Classify: classify, Logger: log, Rand: func(int64) int64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	cat := &fakeCatalog{prices: map[string]Price{
		"SKU-1": {UnitPrice: 1299, Currency: "USD"},
		"SKU-2": {UnitPrice: 500, Currency: "USD"},
	}}
	return &bundle{svc: newService(cfg, policy, cat.fetch, Options{Logger: log}), cat: cat, cfg: cfg}
}

// lookup fails the test unless the lookup succeeds.
func (b *bundle) lookup(t *testing.T, skus ...string) Quote {
	t.Helper()
	q, err := b.svc.Lookup(t.Context(), skus)
	if err != nil {
		t.Fatalf("Lookup(%v): %v", skus, err)
	}
	return q
}

// counts reads the cache's lookup counters.
func (b *bundle) counts() map[string]float64 {
	m := b.svc.metrics
	return map[string]float64{
		resultHit:         testutil.ToFloat64(m.hit),
		resultMiss:        testutil.ToFloat64(m.miss),
		resultStale:       testutil.ToFloat64(m.stale),
		resultUnavailable: testutil.ToFloat64(m.unavailable),
	}
}

// advance moves the bubble's fake clock forward by d and lets every
// goroutine of the bubble settle. Call it from the bubble's root goroutine.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}
