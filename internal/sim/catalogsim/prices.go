package catalogsim

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// book is the price list.
type book struct {
	mu     sync.RWMutex
	prices map[string]Price
}

func newBook(prices map[string]Price) *book { return &book{prices: prices} }

func (b *book) get(sku string) (Price, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	p, ok := b.prices[sku]
	return p, ok
}

func (b *book) set(sku string, p Price) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prices[sku] = p
}

func (b *book) remove(sku string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.prices[sku]
	delete(b.prices, sku)
	return ok
}

func (b *book) all() map[string]Price {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return maps.Clone(b.prices)
}

func (b *book) replace(prices map[string]Price) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prices = prices
}

// pricesAnswer is the body of a 200 from GET /v1/prices.
type pricesAnswer struct {
	Prices  map[string]Price `json:"prices"`
	Unknown []string         `json:"unknown"`
}

// parseSKUs reads the skus parameter: given once, 1 to maxSKUs
// comma-separated SKUs, none empty. Duplicates are answered once.
func parseSKUs(r *http.Request) ([]string, error) {
	values := r.URL.Query()["skus"]
	if len(values) != 1 {
		return nil, fmt.Errorf("give the skus parameter exactly once, as skus=A,B")
	}
	skus := strings.Split(values[0], ",")
	if slices.Contains(skus, "") {
		return nil, fmt.Errorf("skus must be comma-separated SKUs, none empty")
	}
	skus = slices.Compact(slices.Sorted(slices.Values(skus)))
	if len(skus) > maxSKUs {
		return nil, fmt.Errorf("at most %d SKUs per request", maxSKUs)
	}
	return skus, nil
}

// handlePrices serves GET /v1/prices: faults first (they stand for trouble
// in front of the catalog), then the answer from the price list as it is
// once the latency has passed.
func (s *Simulator) handlePrices() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		done := s.stats.add()
		outcome := s.servePrices(w, r, s.srv.Faults.Active(start))
		done()
		s.metrics.Observe(outcome, time.Since(start))
	}
}

func (s *Simulator) servePrices(w http.ResponseWriter, r *http.Request, f Fault) simulator.Outcome {
	if f.Down {
		simulator.WriteError(w, http.StatusServiceUnavailable, "api_error", "the catalog is down")
		return simulator.OutcomeDown
	}
	if f.ErrorRate > 0 && s.srv.Random() < f.ErrorRate {
		simulator.WriteError(w, http.StatusInternalServerError, "api_error", "injected server error")
		return simulator.OutcomeError
	}
	skus, err := parseSKUs(r)
	if err != nil {
		simulator.WriteError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return simulator.OutcomeInvalid
	}
	s.stats.requested(len(skus))
	// A read has nothing to finish for a client that left.
	if !simulator.Sleep(r.Context(), s.latency()+time.Duration(f.Latency)) {
		return simulator.OutcomeAbandoned
	}
	answer := pricesAnswer{Prices: make(map[string]Price, len(skus)), Unknown: []string{}}
	for _, sku := range skus {
		if p, ok := s.book.get(sku); ok {
			answer.Prices[sku] = p
		} else {
			answer.Unknown = append(answer.Unknown, sku)
		}
	}
	simulator.WriteJSON(w, http.StatusOK, answer)
	return outcomeOK
}

// latency draws this request's time from Latency ± Jitter.
func (s *Simulator) latency() time.Duration {
	return simulator.Jittered(s.cfg.Latency, s.cfg.Jitter, s.srv.Random)
}
