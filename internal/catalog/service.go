package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// errPanicked is a catalog lookup that panicked: a bug.
var errPanicked = errors.New("lookup panicked")

// Options carries what a Service needs besides its Config.
type Options struct {
	// Metrics receives the cache's metrics; nil keeps them unregistered.
	Metrics *Metrics
	// Resilience receives the policy's metrics, under name="catalog"; pass
	// the process's shared resilience.Metrics. nil keeps them unregistered.
	Resilience *resilience.Metrics
	// Logger receives the policy's breaker transitions and retries; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Service looks prices up in the catalog through the cache and the
// catalog's policy, and checks orders against them. It is safe for
// concurrent use; build one per process and share it.
type Service struct {
	cfg       Config
	policy    *resilience.Policy
	fetch     func(context.Context, []string) (Quote, error) // one attempt
	closeIdle func()
	cache     *cache
	flights   singleflight.Group
	metrics   *Metrics
	log       *slog.Logger
}

// New builds the Service for the catalog at cfg.URL: an HTTP client with
// its own transport (connections capped at the bulkhead's size in
// protected mode, uncapped otherwise, as internal/payment does: a cap is a
// bulkhead too) behind a resilience policy named "catalog".
func New(cfg Config, opts Options) (*Service, error) {
	if cfg.URL == "" {
		return nil, errors.New("catalog: URL is empty (without a catalog there is no price check: build no Service)")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	maxConns := cfg.Resilience.MaxConcurrency() // the limit's maximum; 0 outside protected mode
	if maxConns == 0 {
		maxConns = -1 // no cap: a cap is a concurrency limit too
	}
	c, err := newClient(cfg.URL, maxConns)
	if err != nil {
		return nil, err
	}
	policy, err := resilience.New(Name, cfg.Resilience, resilience.Options{
		Classify: classify, Metrics: opts.Resilience, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	s := newService(cfg, policy, c.prices, opts)
	s.closeIdle = c.closeIdleConnections
	return s, nil
}

// newService builds a Service around fetch, one attempt at the catalog;
// tests pass a fake one.
func newService(cfg Config, policy *resilience.Policy, fetch func(context.Context, []string) (Quote, error), opts Options) *Service {
	s := &Service{cfg: cfg, policy: policy, fetch: fetch, closeIdle: func() {}, metrics: opts.Metrics, log: opts.Logger}
	if s.metrics == nil {
		s.metrics, _ = NewMetrics(nil) // cannot fail without a registry
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.cache = newCache(cfg.CacheSize, s.metrics)
	return s
}

// CloseIdleConnections closes kept-alive connections to the catalog, for
// shutdown.
func (s *Service) CloseIdleConnections() { s.closeIdle() }

// Check looks up the prices of o's SKUs and checks o against them. It
// returns the quote it used — also with a *MismatchError, so the caller can
// say that a verdict rests on a stale answer — and nil, a *MismatchError
// (ErrUnknownSKU, ErrPriceChanged) or a *UnavailableError (ErrUnavailable).
// Any other error is unexpected: a bug on our side, such as a request the
// catalog rejected.
func (s *Service) Check(ctx context.Context, o Order) (Quote, error) {
	skus := make([]string, len(o.Items))
	for i, it := range o.Items {
		skus[i] = it.SKU
	}
	q, err := s.Lookup(ctx, skus)
	if err != nil {
		return Quote{}, err
	}
	return q, q.Check(o)
}

// Lookup returns the quote for skus (duplicates allowed). A fresh cache
// entry answers for its SKU; the others are asked of the catalog, and when
// it is unavailable a cached answer up to MaxStaleness old stands in, and
// the quote is marked stale. If some SKU has neither, Lookup returns an
// *UnavailableError. A SKU that the protocol cannot name (empty, or holding
// a comma, its separator) cannot be in the catalog: it is unknown without
// a request.
//
// Waiting for the catalog ends at ctx's deadline, which counts as the
// catalog being unavailable; the request itself runs on, bounded by
// Config.Budget, for the lookups sharing it and for the cache.
func (s *Service) Lookup(ctx context.Context, skus []string) (Quote, error) {
	q := Quote{Prices: make(map[string]Price, len(skus))}
	var used []entry // every answer the quote rests on, for its Age
	use := func(sku string, e entry) {
		if e.known {
			q.Prices[sku] = e.price
		} else {
			q.Unknown = append(q.Unknown, sku)
		}
		used = append(used, e)
	}

	var missing []string
	now := time.Now()
	for _, sku := range distinct(skus) {
		if sku == "" || strings.Contains(sku, ",") {
			q.Unknown = append(q.Unknown, sku)
			continue
		}
		if e, ok := s.cache.get(sku); ok && e.age(now) < s.cfg.TTL {
			s.metrics.hit.Inc()
			use(sku, e)
			continue
		}
		missing = append(missing, sku)
	}

	var unavailable []string
	var cause error
	for batch := range slices.Chunk(missing, maxBatch) {
		answers, err := s.request(ctx, batch)
		if errors.Is(err, errRejected) || errors.Is(err, errPanicked) {
			// Our bug, not the catalog's trouble: a stale answer would
			// hide it until the staleness bound turned it into 503s.
			return Quote{}, err
		}
		if err == nil {
			for _, sku := range batch {
				s.metrics.miss.Inc()
				use(sku, answers[sku])
			}
			continue
		}
		// The policy's fallback: the last answer, if young enough.
		cause = err
		now := time.Now()
		for _, sku := range batch {
			e, ok := s.cache.get(sku)
			switch {
			case !ok || e.age(now) > s.cfg.MaxStaleness:
				s.metrics.unavailable.Inc()
				unavailable = append(unavailable, sku)
			case e.age(now) < s.cfg.TTL:
				// Refreshed meanwhile by a lookup that got through.
				s.metrics.hit.Inc()
				use(sku, e)
			default:
				s.metrics.stale.Inc()
				s.metrics.staleAge.Observe(e.age(now).Seconds())
				q.Stale = true
				use(sku, e)
			}
		}
	}
	if len(unavailable) > 0 {
		return Quote{}, &UnavailableError{SKUs: unavailable, RetryAfter: s.retryAfter(), Err: cause}
	}

	slices.Sort(q.Unknown)
	now = time.Now()
	for _, e := range used {
		q.Age = max(q.Age, e.age(now))
	}
	return q, nil
}

// request returns the catalog's answers for skus (sorted, distinct, 1 to
// maxBatch), sharing the request with every concurrent lookup of the same
// SKUs: they wait for one flight instead of each asking the catalog.
//
// Flights are keyed by the set of missing SKUs, not by SKU: a lookup of n
// SKUs is one request, as the protocol is batched, and the herd that
// coalescing exists for — many orders for the same hot products when
// their entries expire — asks for the same set. Orders whose missing sets
// only overlap make one request each; keying per SKU would need each
// lookup to join some flights and lead a batch of the rest, which
// singleflight does not do.
func (s *Service) request(ctx context.Context, skus []string) (map[string]entry, error) {
	led := false
	ch := s.flights.DoChan(strings.Join(skus, ","), func() (any, error) {
		led = true
		return s.fly(ctx, skus)
	})
	select {
	case r := <-ch:
		// The flight wrote led before its result was sent on ch.
		if !led {
			s.metrics.coalesced.Inc()
		}
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(map[string]entry), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("catalog: stopped waiting for prices: %w", ctx.Err())
	}
}

// fly makes one catalog request through the policy and stores the answers.
// It runs on its own goroutine with the leader's context values but not its
// cancellation: the lookups sharing the flight must not fail because the
// one that started it gave up. Config.Budget bounds it instead.
func (s *Service) fly(ctx context.Context, skus []string) (answers map[string]entry, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Budget)
	defer cancel()
	defer func() {
		// A panic in a flight would crash the process from singleflight's
		// goroutine, where no HTTP server recovers it. Make it this
		// lookup's error instead, as a handler panic would be.
		if r := recover(); r != nil {
			s.log.ErrorContext(ctx, "catalog lookup panicked", "panic", r)
			answers, err = nil, fmt.Errorf("catalog: %w: %v", errPanicked, r)
		}
	}()
	s.metrics.requests.Inc()
	var sent time.Time
	lookup := ctx
	q, err := resilience.Do(ctx, s.policy, func(ctx context.Context) (Quote, error) {
		sent = time.Now() // the answer is at least this fresh
		q, err := s.fetch(ctx, skus)
		s.metrics.observeCall(lookup, time.Since(sent), err)
		return q, err
	})
	if err != nil {
		return nil, err
	}
	answers = make(map[string]entry, len(skus))
	for _, sku := range skus {
		p, known := q.Prices[sku]
		answers[sku] = entry{price: p, known: known, fetched: sent}
	}
	s.cache.put(answers)
	return answers, nil
}

// retryAfter is when an unavailable lookup is worth repeating.
func (s *Service) retryAfter() time.Duration {
	if d := s.policy.RetryAfter(); d > 0 {
		return d
	}
	return DefaultRetryAfter
}

// distinct returns skus sorted, without duplicates.
func distinct(skus []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(skus)))
}
