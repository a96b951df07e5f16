package catalog

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConcurrentMissesShareOneRequest: the herd coalescing exists for —
// many orders for the same products while their entries are missing — costs
// the catalog one request. SKUs are compared as a set: order and
// duplicates don't matter.
func TestConcurrentMissesShareOneRequest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.cat.set(func(f *fakeCatalog) { f.delay = 100 * time.Millisecond })
		sets := [][]string{{"SKU-1", "SKU-2"}, {"SKU-2", "SKU-1"}, {"SKU-2", "SKU-1", "SKU-2"}}
		const n = 12
		var wg sync.WaitGroup
		quotes := make([]Quote, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { quotes[i], errs[i] = b.svc.Lookup(t.Context(), sets[i%len(sets)]) })
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || len(quotes[i].Prices) != 2 {
				t.Errorf("lookup %d: got %+v, %v; want both prices", i, quotes[i], errs[i])
			}
		}
		if got, want := b.cat.callCount(), 1; got != want {
			t.Errorf("catalog calls: got %d, want %d", got, want)
		}
		m := b.svc.metrics
		if got, want := testutil.ToFloat64(m.coalesced), float64(n-1); got != want {
			t.Errorf("coalesced: got %v, want %v", got, want)
		}
		if got, want := testutil.ToFloat64(m.requests), 1.0; got != want {
			t.Errorf("requests: got %v, want %v", got, want)
		}
	})
}

// TestOverlappingMissesMakeOneRequestEach documents the choice of keying
// flights by SKU set: two lookups whose missing SKUs only overlap make one
// request each (SKU-1 is asked for twice), and both fill the cache.
func TestOverlappingMissesMakeOneRequestEach(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.cat.set(func(f *fakeCatalog) { f.delay = 100 * time.Millisecond })
		var wg sync.WaitGroup
		wg.Go(func() { b.lookup(t, "SKU-1", "SKU-2") })
		wg.Go(func() { b.lookup(t, "SKU-1", "SKU-3") })
		wg.Wait()
		if got, want := b.cat.callCount(), 2; got != want {
			t.Errorf("catalog calls: got %d, want %d", got, want)
		}
		if q := b.lookup(t, "SKU-1", "SKU-2", "SKU-3"); b.cat.callCount() != 2 || len(q.Prices)+len(q.Unknown) != 3 {
			t.Errorf("afterwards: got %+v after %d calls, want all three from the cache", q, b.cat.callCount())
		}
	})
}

// TestLeaderGivingUpDoesNotFailTheOthers: the request runs on for the
// lookups sharing it when the lookup that started it leaves, so one
// impatient caller cannot fail everybody waiting with it.
func TestLeaderGivingUpDoesNotFailTheOthers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		b.cat.set(func(f *fakeCatalog) { f.delay = 100 * time.Millisecond })

		ctx, cancel := context.WithCancel(t.Context())
		leader := make(chan error, 1)
		go func() {
			_, err := b.svc.Lookup(ctx, []string{"SKU-1"})
			leader <- err
		}()
		synctest.Wait() // the leader's request is in flight
		follower := make(chan Quote, 1)
		go func() { follower <- b.lookup(t, "SKU-1") }()
		synctest.Wait()
		cancel()

		if err := <-leader; err == nil {
			t.Error("leader that gave up on a cold cache: got nil error, want unavailable")
		}
		start := time.Now()
		q := <-follower
		if q.Prices["SKU-1"].UnitPrice != 1299 || time.Since(start) != 100*time.Millisecond {
			t.Errorf("follower: got %+v after %v, want the price when the request ends", q, time.Since(start))
		}
		if got, want := b.cat.callCount(), 1; got != want {
			t.Errorf("catalog calls: got %d, want %d", got, want)
		}
	})
}
