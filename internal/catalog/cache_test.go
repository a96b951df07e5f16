package catalog

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// TestFreshStaleExpired walks one SKU through every state of its cache
// entry, on the bubble's clock: fresh (no request), expired and refreshed,
// stale (served while the catalog is down, up to the bound, inclusive),
// too old (unavailable), and fresh again once the catalog is back.
func TestFreshStaleExpired(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		want := Price{UnitPrice: 1299, Currency: "USD"}

		q := b.lookup(t, "SKU-1")
		if q.Prices["SKU-1"] != want || q.Stale || q.Age != 0 || b.cat.callCount() != 1 {
			t.Fatalf("cold lookup: got %+v after %d calls, want %v fresh from 1 call", q, b.cat.callCount(), want)
		}

		advance(b.cfg.TTL - time.Nanosecond)
		q = b.lookup(t, "SKU-1")
		if q.Stale || q.Age != b.cfg.TTL-time.Nanosecond || b.cat.callCount() != 1 {
			t.Errorf("just under the TTL: got %+v after %d calls, want a fresh hit of that age and no call", q, b.cat.callCount())
		}

		advance(time.Nanosecond)
		q = b.lookup(t, "SKU-1")
		if q.Stale || q.Age != 0 || b.cat.callCount() != 2 {
			t.Errorf("at the TTL: got %+v after %d calls, want a refresh (2 calls)", q, b.cat.callCount())
		}

		b.cat.set(func(f *fakeCatalog) { f.err = errDown })
		advance(b.cfg.TTL)
		q = b.lookup(t, "SKU-1")
		if q.Prices["SKU-1"] != want || !q.Stale || q.Age != b.cfg.TTL {
			t.Errorf("catalog down, entry past the TTL: got %+v, want %v stale at age %v", q, want, b.cfg.TTL)
		}

		advance(b.cfg.MaxStaleness - b.cfg.TTL)
		q = b.lookup(t, "SKU-1")
		if !q.Stale || q.Age != b.cfg.MaxStaleness {
			t.Errorf("at the staleness bound: got %+v, want stale at age %v", q, b.cfg.MaxStaleness)
		}

		advance(time.Nanosecond)
		_, err := b.svc.Lookup(t.Context(), []string{"SKU-1"})
		var unavailable *UnavailableError
		if !errors.As(err, &unavailable) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, errDown) {
			t.Fatalf("past the staleness bound: got %v, want an *UnavailableError wrapping the catalog's", err)
		}
		if got, want := fmt.Sprint(unavailable.SKUs), "[SKU-1]"; got != want {
			t.Errorf("unavailable SKUs: got %s, want %s", got, want)
		}
		if got, want := unavailable.RetryAfter, DefaultRetryAfter; got != want {
			t.Errorf("RetryAfter with the breaker closed: got %v, want %v", got, want)
		}

		b.cat.set(func(f *fakeCatalog) { f.err = nil })
		if q := b.lookup(t, "SKU-1"); q.Stale || q.Prices["SKU-1"] != want {
			t.Errorf("catalog back: got %+v, want a fresh answer", q)
		}
		want4 := map[string]float64{resultHit: 1, resultMiss: 3, resultStale: 2, resultUnavailable: 1}
		if got := b.counts(); fmt.Sprint(got) != fmt.Sprint(want4) {
			t.Errorf("lookup counters: got %v, want %v", got, want4)
		}
	})
}

// TestBreakerOpensAndStaleIsServedWithoutCalling checks the fallback is
// the breaker's: once enough lookups failed it opens, and lookups are
// answered from the cache at once, without a call; a SKU never seen gets
// the breaker's remaining open time as its Retry-After; after the open
// duration a probe gets through, and the catalog's answer is fresh again.
func TestBreakerOpensAndStaleIsServedWithoutCalling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.lookup(t, "SKU-1")
		b.cat.set(func(f *fakeCatalog) { f.err = errDown })
		advance(b.cfg.TTL)

		// Two attempts per lookup: the window of the last 10 calls (the
		// warm-up's success and nine failures) trips the breaker during
		// the fifth lookup, whose fallback is stale all the same.
		for i := range 5 {
			if q := b.lookup(t, "SKU-1"); !q.Stale {
				t.Fatalf("lookup %d during the outage: got %+v, want stale", i, q)
			}
		}
		if got, want := b.svc.policy.State(), resilience.StateOpen; got != want {
			t.Fatalf("breaker after 10 failed attempts: got %v, want %v", got, want)
		}
		calls := b.cat.callCount()
		start := time.Now()
		if q := b.lookup(t, "SKU-1"); !q.Stale || time.Since(start) != 0 {
			t.Errorf("breaker open: got %+v after %v, want stale at once", q, time.Since(start))
		}
		_, err := b.svc.Lookup(t.Context(), []string{"SKU-2"})
		var unavailable *UnavailableError
		if !errors.As(err, &unavailable) || !errors.Is(err, resilience.ErrOpen) {
			t.Fatalf("cold SKU with the breaker open: got %v, want an *UnavailableError wrapping ErrOpen", err)
		}
		if got, want := unavailable.RetryAfter, b.cfg.Resilience.OpenDuration; got != want {
			t.Errorf("RetryAfter: got %v, want the open duration %v (no jitter drawn)", got, want)
		}
		if got := b.cat.callCount(); got != calls {
			t.Errorf("catalog calls while open: got %d more, want none", got-calls)
		}

		b.cat.set(func(f *fakeCatalog) { f.err = nil })
		advance(b.cfg.Resilience.OpenDuration + time.Nanosecond) // gobreaker: open until strictly after its expiry
		if q := b.lookup(t, "SKU-1", "SKU-2"); q.Stale || len(q.Prices) != 2 {
			t.Errorf("after the open duration: got %+v, want both fresh from a probe", q)
		}
	})
}

// TestCallerDeadlineFallsBackWhileTheRequestFillsTheCache: a slow catalog
// makes a caller with a short deadline fall back to the stale entry at its
// deadline, while the request it started carries on and refreshes the
// entry for the next lookup.
func TestCallerDeadlineFallsBackWhileTheRequestFillsTheCache(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.lookup(t, "SKU-1")
		b.cat.set(func(f *fakeCatalog) {
			f.delay = 200 * time.Millisecond // under the attempt timeout
			f.prices["SKU-1"] = Price{UnitPrice: 1399, Currency: "USD"}
		})
		advance(b.cfg.TTL)

		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		q, err := b.svc.Lookup(ctx, []string{"SKU-1"})
		if err != nil || !q.Stale || q.Prices["SKU-1"].UnitPrice != 1299 || q.Age != b.cfg.TTL+100*time.Millisecond {
			t.Fatalf("caller deadline before the answer: got %+v, %v; want the old price, stale", q, err)
		}
		advance(100 * time.Millisecond)
		q = b.lookup(t, "SKU-1")
		if q.Stale || q.Prices["SKU-1"].UnitPrice != 1399 || b.cat.callCount() != 2 {
			t.Errorf("after the request finished: got %+v after %d calls, want the new price cached by it", q, b.cat.callCount())
		}
	})
}

// TestOurBugsAreNotServedStale: a request the catalog rejects (400) or a
// lookup that panics is our bug; it is returned as it is, not hidden
// behind a stale answer, and the rejection is not retried.
func TestOurBugsAreNotServedStale(t *testing.T) {
	t.Parallel()
	tests := map[string]func(f *fakeCatalog){
		"rejected": func(f *fakeCatalog) { f.err = fmt.Errorf("catalog: status 400: %w", errRejected) },
		"panic":    func(f *fakeCatalog) { f.panics = true },
	}
	for name, breakIt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, nil)
				b.lookup(t, "SKU-1")
				b.cat.set(breakIt)
				advance(b.cfg.TTL)
				_, err := b.svc.Lookup(t.Context(), []string{"SKU-1"})
				if err == nil || errors.Is(err, ErrUnavailable) {
					t.Fatalf("got %v, want our bug, not a stale answer or ErrUnavailable", err)
				}
				if got, want := b.cat.callCount(), 2; got != want {
					t.Errorf("calls: got %d, want %d (no retry)", got, want)
				}
			})
		})
	}
}

// TestUnknownSKUsAreCached: the catalog's "unknown" is an answer like a
// price, fresh for the TTL and served stale in an outage.
func TestUnknownSKUsAreCached(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		if q := b.lookup(t, "SKU-404", "SKU-1"); fmt.Sprint(q.Unknown) != "[SKU-404]" || len(q.Prices) != 1 {
			t.Fatalf("got %+v, want SKU-404 unknown and SKU-1 priced", q)
		}
		if q := b.lookup(t, "SKU-404"); fmt.Sprint(q.Unknown) != "[SKU-404]" || b.cat.callCount() != 1 {
			t.Errorf("again within the TTL: got %+v after %d calls, want a cached unknown", q, b.cat.callCount())
		}
		b.cat.set(func(f *fakeCatalog) { f.err = errDown })
		advance(b.cfg.TTL)
		if q := b.lookup(t, "SKU-404"); fmt.Sprint(q.Unknown) != "[SKU-404]" || !q.Stale {
			t.Errorf("in an outage: got %+v, want a stale unknown", q)
		}
	})
}

// TestUnnameableSKUsAreUnknownWithoutARequest: the protocol separates SKUs
// with commas, so a SKU holding one (or an empty one) cannot be in the
// catalog, and asking would only get the request rejected.
func TestUnnameableSKUsAreUnknownWithoutARequest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	q := b.lookup(t, "SKU-1,SKU-2", "", "SKU-1,SKU-2")
	if got, want := fmt.Sprintf("%q", q.Unknown), `["" "SKU-1,SKU-2"]`; got != want || len(q.Prices) != 0 {
		t.Errorf("got %+v, want both unknown, once each", q)
	}
	if got := b.cat.callCount(); got != 0 {
		t.Errorf("catalog calls: got %d, want 0", got)
	}
}

// TestCacheIsBounded: beyond CacheSize SKUs the least recently used entry
// is evicted, and asked for again.
func TestCacheIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.CacheSize = 2 })
	b.lookup(t, "SKU-1")
	b.lookup(t, "SKU-2")
	b.lookup(t, "SKU-1") // SKU-2 is now the least recently used
	b.lookup(t, "SKU-3")
	if got, want := b.cat.callCount(), 3; got != want {
		t.Fatalf("calls: got %d, want %d", got, want)
	}
	b.lookup(t, "SKU-1")
	if got, want := b.cat.callCount(), 3; got != want {
		t.Errorf("SKU-1, recently used: got %d calls, want %d (kept)", got, want)
	}
	b.lookup(t, "SKU-2")
	if got, want := b.cat.callCount(), 4; got != want {
		t.Errorf("SKU-2, least recently used: got %d calls, want %d (evicted)", got, want)
	}
	if got, want := b.svc.cache.lru.Len(), 2; got != want {
		t.Errorf("entries: got %d, want %d", got, want)
	}
}

// TestOlderAnswerDoesNotReplaceNewer: overlapping lookups may finish out
// of order; the cache keeps the answer whose request was sent last.
func TestOlderAnswerDoesNotReplaceNewer(t *testing.T) {
	t.Parallel()
	c := newCache(10, nil)
	c.metrics, _ = NewMetrics(nil)
	t0 := time.Now()
	c.put(map[string]entry{"SKU-1": {price: Price{1399, "USD"}, known: true, fetched: t0.Add(time.Second)}})
	c.put(map[string]entry{"SKU-1": {price: Price{1299, "USD"}, known: true, fetched: t0}})
	if e, _ := c.get("SKU-1"); e.price.UnitPrice != 1399 {
		t.Errorf("got %v, want the newer answer, 1399", e.price)
	}
}

// TestPartialOutage: a lookup with a fresh SKU and an expired one asks only
// for the expired one; when that fails the quote is stale, with the age of
// the oldest answer it used.
func TestPartialOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.lookup(t, "SKU-1")
		advance(b.cfg.TTL)
		b.lookup(t, "SKU-2")
		b.cat.set(func(f *fakeCatalog) { f.err = errDown })
		advance(time.Second)

		q := b.lookup(t, "SKU-1", "SKU-2")
		if !q.Stale || q.Age != b.cfg.TTL+time.Second || len(q.Prices) != 2 {
			t.Errorf("got %+v, want both prices, stale, aged %v", q, b.cfg.TTL+time.Second)
		}
		if got, want := b.cat.calls[len(b.cat.calls)-1], "[SKU-1]"; fmt.Sprint(got) != want {
			t.Errorf("last request: got %v, want %s (SKU-2 was fresh)", got, want)
		}
	})
}

// TestBulkheadFullFallsBack: a lookup that finds every catalog slot taken
// is answered from the cache at once, or gets the unavailable error.
func TestBulkheadFullFallsBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) {
			c.Resilience.LimitInitial, c.Resilience.LimitMin, c.Resilience.LimitMax, c.Resilience.BulkheadWait = 1, 1, 1, 0
		})
		b.lookup(t, "SKU-2")
		advance(b.cfg.TTL)
		b.cat.set(func(f *fakeCatalog) { f.delay = 200 * time.Millisecond })
		go b.svc.Lookup(t.Context(), []string{"SKU-1"}) // holds the only slot
		synctest.Wait()

		start := time.Now()
		if q, err := b.svc.Lookup(t.Context(), []string{"SKU-2"}); err != nil || !q.Stale || time.Since(start) != 0 {
			t.Errorf("expired SKU, bulkhead full: got %+v, %v after %v, want stale at once", q, err, time.Since(start))
		}
		_, err := b.svc.Lookup(t.Context(), []string{"SKU-3"})
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, resilience.ErrBulkheadFull) {
			t.Errorf("cold SKU, bulkhead full: got %v, want ErrUnavailable wrapping ErrBulkheadFull", err)
		}
		advance(200 * time.Millisecond)
	})
}
