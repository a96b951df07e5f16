package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Probe says which endpoint a sample measured.
type Probe string

// The two endpoints a run measures.
const (
	ProbeCheckout Probe = "checkout" // POST /orders
	ProbeHealth   Probe = "health"   // GET /health
)

// Outcomes that are not an HTTP status code.
const (
	OutcomeTimeout = "timeout" // the client gave up after its timeout
	OutcomeError   = "error"   // no HTTP answer: connection refused or reset
)

// Sample is one request: when it was due, how late it went out, how long it took and how it
// ended (an HTTP status code, OutcomeTimeout or OutcomeError).
type Sample struct {
	Probe   Probe  `json:"probe"`
	At      Millis `json:"at_ms"` // scheduled offset from the run's start
	Lag     Millis `json:"lag_ms"`
	Latency Millis `json:"latency_ms"`
	Outcome string `json:"outcome"`
	OrderID string `json:"order_id,omitempty"` // the order an acknowledged checkout names
	// Stale reports that checkout marked the answer's prices stale: checked against cached
	// catalog prices while the catalog was unavailable (the Catalog-Prices header).
	Stale bool `json:"stale,omitempty"`
	// RetryAfter is the answer's Retry-After header, as sent.
	RetryAfter string `json:"retry_after,omitempty"`
}

// stalePricesHeader is the header checkout marks an answer with when it checked the order's
// prices against cached ones while the catalog was unavailable: "Catalog-Prices: stale;
// age=95" (docs/design.md, "Catalog protocol"). The experiment reads it as any client would.
const stalePricesHeader = "Catalog-Prices"

// isStale reports whether a Catalog-Prices value says "stale", its first item.
func isStale(v string) bool {
	item, _, _ := strings.Cut(v, ";")
	return strings.TrimSpace(item) == "stale"
}

// load issues the run's requests. Checkout and /health get their own transports so that
// neither waits for the other's connections.
type load struct {
	cfg        Config
	runID      string
	customerID string
	// items are what the orders buy, one item each, in turn: the catalog's SKUs at the
	// catalog's prices when checkout checks them, so that every order passes the check.
	items  []pricedItem
	orders *http.Client
	health *http.Client
}

// pricedItem is a SKU with its price as the catalog lists it.
type pricedItem struct {
	SKU       string
	UnitPrice int64
	Currency  string
}

// defaultItems is what orders buy when checkout trusts the client's prices: catalogsim's
// SKU-1 at its seed price, so that the same load also passes a price check.
var defaultItems = []pricedItem{{SKU: "SKU-1", UnitPrice: 1299, Currency: "USD"}}

func newLoad(cfg Config, runID string) *load {
	return &load{
		cfg:        cfg,
		runID:      runID,
		customerID: "experiment-" + runID,
		items:      defaultItems,
		orders:     &http.Client{Transport: newTransport()},
		health:     &http.Client{Transport: newTransport()},
	}
}

// catalogItems turns catalogsim's price list into the items orders buy, sorted by SKU so that
// runs against the same catalog order the same SKUs in the same turn.
func catalogItems(prices map[string]catalogPrice) ([]pricedItem, error) {
	if len(prices) == 0 {
		return nil, errors.New("the catalog lists no SKU: every order would be rejected as unknown")
	}
	items := make([]pricedItem, 0, len(prices))
	for _, sku := range slices.Sorted(maps.Keys(prices)) {
		p := prices[sku]
		items = append(items, pricedItem{SKU: sku, UnitPrice: p.UnitPrice, Currency: p.Currency})
	}
	return items, nil
}

// newTransport keeps enough idle connections for an open-loop load: with the default two per
// host, most requests would pay for a new connection, which the tool would then report as the
// service's latency.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	return t
}

// ready checks that checkout answers before the run starts, and opens a connection for each
// transport while doing so.
func (l *load) ready(ctx context.Context) error {
	for _, c := range []*http.Client{l.health, l.orders} {
		for i, base := range l.cfg.checkouts() {
			s := l.probeHealth(ctx, c, time.Now(), i, 0)
			if s.Outcome != "200" {
				return fmt.Errorf("checkout %s/health is not healthy before the run: %s", base, s.Outcome)
			}
		}
	}
	return nil
}

// drive issues every checkout request and /health probe on schedule from start, each on its
// own goroutine so that a slow answer never delays the next request, and returns when all
// have finished, ordered by probe and schedule.
func (l *load) drive(ctx context.Context, start time.Time) []Sample {
	var orders []time.Duration
	switch {
	case l.cfg.RateTo > 0:
		orders = rampSchedule(l.cfg.Rate, l.cfg.RateTo, l.cfg.Duration)
	case l.cfg.RateAfter > 0:
		orders = stepSchedule(l.cfg.Rate, l.cfg.RateAfter, l.cfg.active().end(), l.cfg.Duration)
	default:
		orders = schedule(time.Duration(float64(time.Second)/l.cfg.Rate), l.cfg.Duration)
	}
	probes := schedule(l.cfg.HealthInterval, l.cfg.Duration)
	samples := make([]Sample, len(orders)+len(probes))

	var wg sync.WaitGroup
	wg.Go(func() {
		dispatch(ctx, &wg, start, orders, func(i int, at time.Duration) {
			samples[i] = l.placeOrder(ctx, start, i, at)
		})
	})
	wg.Go(func() {
		dispatch(ctx, &wg, start, probes, func(i int, at time.Duration) {
			samples[len(orders)+i] = l.probeHealth(ctx, l.health, start, i, at)
		})
	})
	wg.Wait()
	return samples
}

// schedule returns the offsets of requests issued every interval during d.
func schedule(interval, d time.Duration) []time.Duration {
	var at []time.Duration
	for t := time.Duration(0); t < d; t += interval {
		at = append(at, t)
	}
	return at
}

// stepSchedule returns the offsets of requests issued at r0 per second until at, then at r1
// per second until d. Each offset is k / rate from where its rate began, so that a rate
// whose interval is no whole number of nanoseconds (60/s) sends no extra request before at.
func stepSchedule(r0, r1 float64, at, d time.Duration) []time.Duration {
	at = min(at, d)
	var offsets []time.Duration
	for _, phase := range []struct {
		rate     float64
		from, to time.Duration
	}{{r0, 0, at}, {r1, at, d}} {
		for k := 0; ; k++ {
			t := phase.from + time.Duration(float64(k)/phase.rate*float64(time.Second))
			if t >= phase.to {
				break
			}
			offsets = append(offsets, t)
		}
	}
	return offsets
}

// rampSchedule returns the offsets of requests whose rate grows linearly from r0 to r1 per
// second over d: the k-th request is due when the ramp's integral, r0·t + (r1−r0)·t²/2d,
// reaches k.
func rampSchedule(r0, r1 float64, d time.Duration) []time.Duration {
	secs := d.Seconds()
	a := (r1 - r0) / (2 * secs) // requests per second²
	var at []time.Duration
	for k := 0; ; k++ {
		var t float64
		if a == 0 {
			t = float64(k) / r0
		} else {
			disc := r0*r0 + 4*a*float64(k)
			if disc < 0 {
				return at // a ramp down to 0 req/s issued its last request
			}
			t = (math.Sqrt(disc) - r0) / (2 * a)
		}
		if t >= secs {
			return at
		}
		at = append(at, time.Duration(t*float64(time.Second)))
	}
}

// dispatch starts fire(i, at) on a new goroutine when each offset comes due. It sleeps rather
// than ticks so that one late wake-up does not shift every later request.
func dispatch(ctx context.Context, wg *sync.WaitGroup, start time.Time, offsets []time.Duration, fire func(int, time.Duration)) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i, at := range offsets {
		timer.Reset(time.Until(start.Add(at)))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		wg.Go(func() { fire(i, at) })
	}
}

// orderBody is the checkout request: one item, a card the simulator charges.
type orderBody struct {
	CustomerID    string      `json:"customer_id"`
	Currency      string      `json:"currency"`
	PaymentMethod string      `json:"payment_method"`
	Items         []orderItem `json:"items"`
}

type orderItem struct {
	SKU       string `json:"sku"`
	Quantity  int    `json:"quantity"`
	UnitPrice int64  `json:"unit_price"`
}

// placeOrder sends the i-th checkout request, due at offset at, with its own idempotency key:
// one of the i-th item (in turn), in that item's currency.
func (l *load) placeOrder(ctx context.Context, start time.Time, i int, at time.Duration) Sample {
	item := l.items[i%len(l.items)]
	body, _ := json.Marshal(orderBody{ // marshalling this struct cannot fail
		CustomerID:    l.customerID,
		Currency:      item.Currency,
		PaymentMethod: "pm_card_visa",
		Items:         []orderItem{{SKU: item.SKU, Quantity: 1, UnitPrice: item.UnitPrice}},
	})
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.checkout(i)+"/orders", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", l.runID+"-"+strconv.Itoa(i))

	s := Sample{Probe: ProbeCheckout, At: Millis(at), Lag: Millis(time.Since(start) - at)}
	sent := time.Now()
	resp, err := l.orders.Do(req)
	if err != nil {
		s.Latency, s.Outcome = Millis(time.Since(sent)), failure(err)
		return s
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	s.Latency = Millis(time.Since(sent))
	if err != nil {
		s.Outcome = failure(err)
		return s
	}
	s.Outcome = strconv.Itoa(resp.StatusCode)
	s.Stale = isStale(resp.Header.Get(stalePricesHeader))
	s.RetryAfter = resp.Header.Get("Retry-After")
	if isAcknowledged(s.Outcome) {
		s.OrderID = orderID(raw, resp.Header.Get("Location"))
	}
	return s
}

// checkout is the base URL of the i-th request or probe: round-robin over the replicas.
func (l *load) checkout(i int) string {
	urls := l.cfg.checkouts()
	return urls[i%len(urls)]
}

// probeHealth sends the i-th GET /health, due at offset at from start.
func (l *load) probeHealth(ctx context.Context, c *http.Client, start time.Time, i int, at time.Duration) Sample {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.HealthTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.checkout(i)+"/health", nil)
	s := Sample{Probe: ProbeHealth, At: Millis(at), Lag: Millis(time.Since(start) - at)}
	sent := time.Now()
	resp, err := c.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	s.Latency = Millis(time.Since(sent))
	if err != nil {
		s.Outcome = failure(err)
		return s
	}
	s.Outcome = strconv.Itoa(resp.StatusCode)
	return s
}

func failure(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return OutcomeTimeout
	}
	return OutcomeError
}

// isAcknowledged reports whether checkout answered with an order it must keep: paid (201),
// deferred (202) or declined (402).
func isAcknowledged(outcome string) bool {
	return outcome == "201" || outcome == "202" || outcome == "402"
}

// orderID finds the order an answer names: the order's id, a decline's order_id, or the
// Location header's last segment.
func orderID(body []byte, location string) string {
	var doc struct {
		ID      string `json:"id"`
		OrderID string `json:"order_id"`
	}
	if json.Unmarshal(body, &doc) == nil {
		if doc.ID != "" {
			return doc.ID
		}
		if doc.OrderID != "" {
			return doc.OrderID
		}
	}
	if strings.Contains(location, "/orders/") {
		return path.Base(location)
	}
	return ""
}

// acknowledged returns the distinct orders checkout acknowledged, with whether each was
// accepted for payment (201 or 202) rather than declined.
func acknowledged(samples []Sample) map[string]bool {
	ids := make(map[string]bool)
	for _, s := range samples {
		if s.Probe == ProbeCheckout && s.OrderID != "" {
			ids[s.OrderID] = ids[s.OrderID] || s.Outcome != "402"
		}
	}
	return ids
}
