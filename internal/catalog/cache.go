package catalog

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// entry is the catalog's last answer for one SKU: its price, or that it is
// unknown. Unknown answers are cached like prices, so a client sending
// made-up SKUs costs the catalog one request per SKU and TTL, not one per
// order.
type entry struct {
	price   Price
	known   bool
	fetched time.Time // when the request that produced it was sent
}

func (e entry) age(now time.Time) time.Duration { return now.Sub(e.fetched) }

// cache is a bounded map of entries, least recently used evicted first.
// simplelru does the bookkeeping; the mutex is ours, because storing must
// compare with the entry already there (see put), which the locked
// lru.Cache cannot do in one step.
type cache struct {
	mu      sync.Mutex
	lru     *simplelru.LRU[string, entry]
	metrics *Metrics
}

func newCache(size int, m *Metrics) *cache {
	c := &cache{metrics: m}
	c.lru, _ = simplelru.NewLRU[string, entry](size, nil) // fails only for size < 1, which Config.Validate rules out
	return c
}

// get returns sku's entry and marks it recently used.
func (c *cache) get(sku string) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Get(sku)
}

// put stores answers unless the cache already holds a newer one for the
// SKU: two overlapping lookups may finish out of order, and the older
// answer must not replace the newer.
func (c *cache) put(answers map[string]entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for sku, e := range answers {
		if old, ok := c.lru.Peek(sku); ok && old.fetched.After(e.fetched) {
			continue
		}
		c.lru.Add(sku, e)
	}
	c.metrics.entries.Set(float64(c.lru.Len()))
}
