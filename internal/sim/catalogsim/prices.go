package catalogsim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
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
		outcome := s.servePrices(w, r, s.faults.active(start))
		done()
		s.metrics.observe(outcome, time.Since(start))
	}
}

func (s *Simulator) servePrices(w http.ResponseWriter, r *http.Request, f Fault) outcome {
	if f.Down {
		writeError(w, http.StatusServiceUnavailable, "api_error", "the catalog is down")
		return outcomeDown
	}
	if f.ErrorRate > 0 && s.random() < f.ErrorRate {
		writeError(w, http.StatusInternalServerError, "api_error", "injected server error")
		return outcomeError
	}
	skus, err := parseSKUs(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return outcomeInvalid
	}
	s.stats.requested(len(skus))
	// A read has nothing to finish for a client that left.
	if !sleep(r.Context(), s.latency()+time.Duration(f.Latency)) {
		return outcomeAbandoned
	}
	answer := pricesAnswer{Prices: make(map[string]Price, len(skus)), Unknown: []string{}}
	for _, sku := range skus {
		if p, ok := s.book.get(sku); ok {
			answer.Prices[sku] = p
		} else {
			answer.Unknown = append(answer.Unknown, sku)
		}
	}
	writeJSON(w, http.StatusOK, answer)
	return outcomeOK
}

// latency draws this request's time from Latency ± Jitter.
func (s *Simulator) latency() time.Duration {
	spread := time.Duration((2*s.random() - 1) * float64(s.cfg.Jitter))
	return max(s.cfg.Latency+spread, 0)
}

// sleep waits d unless ctx ends first, and reports whether it slept it all.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, c := range []byte(s) {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		// Only our own fixed types are encoded here; failing is a programming error.
		panic(fmt.Sprintf("catalogsim: encode %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // The client may be gone; there is nobody to tell.
}

// writeError writes the catalog's error body, {"error":{"type":…,"message":…}}.
func writeError(w http.ResponseWriter, status int, typ, message string) {
	type detail struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	writeJSON(w, status, struct {
		Error detail `json:"error"`
	}{detail{typ, message}})
}
