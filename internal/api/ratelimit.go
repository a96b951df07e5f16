package api

import (
	"hash/maphash"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"
)

// RateLimit is the per-client limit of the business routes: Requests per
// Window per customer with authentication on, per remote address otherwise.
type RateLimit struct {
	Requests int
	Window   time.Duration
	// TrustedProxies are the peers whose X-Forwarded-For names the client;
	// from any other peer the header is ignored, so a client cannot pick
	// its own key.
	TrustedProxies []netip.Prefix
}

// rateLimitPolicy names the one quota in the IETF RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers).
const rateLimitPolicy = `"per-client"`

// Headers httprate writes and rateLimit rewrites into the IETF fields.
const (
	remainingHeader = "X-Ratelimit-Remaining"
	resetHeader     = "X-Ratelimit-Reset"
)

// clientAddr resolves the client's address for the rate limit: the peer,
// or X-Forwarded-For's rightmost untrusted hop when the peer is trusted.
func clientAddr(trusted []netip.Prefix) func(http.Handler) http.Handler {
	if len(trusted) == 0 {
		return middleware.ClientIPFromRemoteAddr
	}
	prefixes := make([]string, len(trusted))
	for i, p := range trusted {
		prefixes[i] = p.String()
	}
	return middleware.ClientIPFromXFF(prefixes...)
}

// rateLimit refuses a client's requests beyond its quota with 429 and
// Retry-After, and tells every client its quota in RateLimit-Policy and
// what is left in RateLimit. httprate's sliding window counts; the counts
// live in a fixed-size sketch (sketchCounter), so memory does not grow
// with the number of clients.
func rateLimit(cfg RateLimit) func(http.Handler) http.Handler {
	limiter := httprate.NewRateLimiter(cfg.Requests, cfg.Window,
		httprate.WithLimitCounter(newSketchCounter()),
		httprate.WithResponseHeaders(httprate.ResponseHeaders{Remaining: remainingHeader, Reset: resetHeader, RetryAfter: "Retry-After"}))
	policy := rateLimitPolicy + ";q=" + strconv.Itoa(cfg.Requests) + ";w=" + strconv.Itoa(int(cfg.Window/time.Second))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := "addr:" + httprate.CanonicalizeIP(middleware.GetClientIP(r.Context()))
			if customer, ok := customerOf(r); ok {
				key = "customer:" + customer
			}
			limited := limiter.OnLimit(w, r, key)
			h := w.Header()
			reset, _ := strconv.ParseInt(h.Get(resetHeader), 10, 64)
			left := max(0, reset-time.Now().Unix())
			// httprate reports limit minus count, which is negative when
			// the sketch overcounts a refused client; the field is not.
			remaining, _ := strconv.Atoi(h.Get(remainingHeader))
			h.Set("RateLimit-Policy", policy)
			h.Set("RateLimit", rateLimitPolicy+";r="+strconv.Itoa(max(0, remaining))+";t="+strconv.FormatInt(left, 10))
			h.Del(remainingHeader)
			h.Del(resetHeader)
			if limited {
				writeProblem(w, newProblem(http.StatusTooManyRequests, "rate-limited", "Too many requests from this client. Retry after the time in the Retry-After header."))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Sketch dimensions: 4 rows of 2^16 counters for each of two windows, 2 MiB
// whatever the number of clients. A count-min sketch never undercounts; a
// client's count is overstated by the others' whose hashes collide with it
// in every row: at most e/2^16 ≈ 0.004 % of all requests in the window,
// with probability 1 - e^-4 ≈ 98 % (Cormode and Muthukrishnan, 2005) —
// 40 requests when a million requests share a window.
const (
	sketchDepth = 4
	sketchWidth = 1 << 16
)

// sketchCounter is an httprate.LimitCounter that keeps the current and the
// previous window's counts in count-min sketches instead of maps, so a
// flood of distinct clients cannot grow checkout's memory.
type sketchCounter struct {
	seed maphash.Seed

	mu            sync.Mutex
	windowLength  time.Duration
	latestWindow  time.Time
	latest, prior *[sketchDepth][sketchWidth]uint32
}

func newSketchCounter() *sketchCounter {
	return &sketchCounter{seed: maphash.MakeSeed(), latest: new([sketchDepth][sketchWidth]uint32), prior: new([sketchDepth][sketchWidth]uint32)}
}

// Config is httprate's call at construction.
func (c *sketchCounter) Config(_ int, windowLength time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.windowLength = windowLength
	c.latestWindow = time.Now().UTC().Truncate(windowLength)
}

// slots are key's counter in each row (Kirsch and Mitzenmacher's double
// hashing: two halves of one hash make the rows' indexes).
func (c *sketchCounter) slots(key string) [sketchDepth]uint32 {
	h := maphash.String(c.seed, key)
	h1, h2 := uint32(h), uint32(h>>32)|1
	var s [sketchDepth]uint32
	for i := range s {
		s[i] = (h1 + uint32(i)*h2) % sketchWidth
	}
	return s
}

// Increment counts one request of key.
func (c *sketchCounter) Increment(key string, currentWindow time.Time) error {
	return c.IncrementBy(key, currentWindow, 1)
}

// IncrementBy counts amount requests of key.
func (c *sketchCounter) IncrementBy(key string, currentWindow time.Time, amount int) error {
	s := c.slots(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance(currentWindow)
	for i, j := range s {
		c.latest[i][j] += uint32(amount)
	}
	return nil
}

// Get returns key's counts in the current and the previous window.
func (c *sketchCounter) Get(key string, currentWindow, previousWindow time.Time) (int, int, error) {
	s := c.slots(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.latestWindow.Equal(currentWindow):
		return estimate(c.latest, s), estimate(c.prior, s), nil
	case c.latestWindow.Equal(previousWindow):
		return 0, estimate(c.latest, s), nil
	}
	return 0, 0, nil
}

// advance moves the windows on to currentWindow, as httprate's own counter
// does: the latest becomes the prior one, or both are cleared after a gap.
func (c *sketchCounter) advance(currentWindow time.Time) {
	if c.latestWindow.Equal(currentWindow) {
		return
	}
	if c.latestWindow.Equal(currentWindow.Add(-c.windowLength)) {
		c.latest, c.prior = c.prior, c.latest
		*c.latest = [sketchDepth][sketchWidth]uint32{}
	} else {
		*c.latest, *c.prior = [sketchDepth][sketchWidth]uint32{}, [sketchDepth][sketchWidth]uint32{}
	}
	c.latestWindow = currentWindow
}

func estimate(rows *[sketchDepth][sketchWidth]uint32, s [sketchDepth]uint32) int {
	n := rows[0][s[0]]
	for i := 1; i < sketchDepth; i++ {
		n = min(n, rows[i][s[i]])
	}
	return int(n)
}
