package paymentsim

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/resilientcheckout/checkout/internal/sim/simulator"
)

// chargeLimiter is the provider's rate limit on charges: a token bucket (golang.org/x/time/rate)
// refilled at N tokens a second that holds one second's worth, so up to N charges pass at
// once and N a second pass sustained, the shape of a per-account limit such as Stripe's. A
// charge over the limit takes no token, so refusing it delays no other charge. The
// limit comes from the configuration or an active fault and may change between charges; a
// new limit starts a new, full bucket.
//
// Only charges are limited. Stripe limits every request of an account, but what a limit does
// to checkout shows in its charges, and leaving reads alone keeps the lookup that settles an
// ambiguous charge answering while charges are refused.
type chargeLimiter struct {
	mu        sync.Mutex
	perSecond int // the limit bucket was made for
	bucket    *rate.Limiter
	refused   int // charges refused since start or reset
}

// admit takes a token for a charge arriving at now under a limit of perSecond charges a
// second, 0 for none. It reports whether the charge may go on and, if not, how long until a
// token will be there for it.
func (l *chargeLimiter) admit(now time.Time, perSecond int) (wait time.Duration, ok bool) {
	if perSecond <= 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if perSecond != l.perSecond {
		l.perSecond, l.bucket = perSecond, rate.NewLimiter(rate.Limit(perSecond), perSecond)
	}
	r := l.bucket.ReserveN(now, 1)
	if wait = r.DelayFrom(now); wait == 0 {
		return 0, true
	}
	r.CancelAt(now) // refused: the token goes back to whoever comes when it is there
	l.refused++
	return wait, false
}

// refusals returns how many charges were refused since start or reset.
func (l *chargeLimiter) refusals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

// reset forgets the refusals and the bucket, so the next limit starts full.
func (l *chargeLimiter) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.perSecond, l.bucket, l.refused = 0, nil, 0
}

// rateLimit answers 429 to a charge over the limit in force, a fault's or else
// Config.RateLimit, and reports whether it did. The answer carries Retry-After in whole
// seconds, rounded up and at least 1, as HTTP has no finer unit: a client that honours it
// finds a token waiting.
func (s *Simulator) rateLimit(w http.ResponseWriter, fault Fault) bool {
	perSecond := s.cfg.RateLimit
	if fault.RateLimit > 0 {
		perSecond = fault.RateLimit
	}
	wait, ok := s.limiter.admit(time.Now(), perSecond)
	if ok {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	simulator.WriteJSON(w, http.StatusTooManyRequests, simulator.CodedErrorBody("invalid_request_error", "rate_limit",
		fmt.Sprintf("too many charges: the limit is %d per second", perSecond)))
	return true
}
