package lookupcost

import (
	"context"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/google/uuid"
)

// outcome is what an order's charge path left it with.
type outcome int

const (
	unknown    outcome = iota // a money-moving request went unanswered: only a lookup can tell
	paid                      // the provider answered succeeded
	notCharged                // certainly not charged: no money-moving request reached the provider
	throttled                 // answered 429: wait and send the same request again
)

// trackedOrder is one order of a load. Its goroutine owns it until the load is over.
type trackedOrder struct {
	id          uuid.UUID
	due         time.Time // when it arrives: the open loop's schedule, its creation time
	lastAttempt time.Time // when its latest charge attempt began
	done        time.Time // when its charge path ended
	outcome     outcome
	intentID    string // two-step: the PaymentIntent stored before the confirm
	err         error  // an errUnexpected answer
}

// newOrders returns rate×d orders due at a constant rate from a second from now.
func newOrders(rate int, d time.Duration) []*trackedOrder {
	start := time.Now().Add(time.Second)
	n := int(d.Seconds() * float64(rate))
	orders := make([]*trackedOrder, n)
	for i := range orders {
		orders[i] = &trackedOrder{id: uuid.New(), due: start.Add(time.Duration(i) * time.Second / time.Duration(rate))}
	}
	return orders
}

// design is a way of charging an order and of settling its unknown outcome.
type design interface {
	name() string
	// prepare readies what the design keeps of the orders before they arrive.
	prepare(ctx context.Context, orders []*trackedOrder) error
	// charge makes one attempt of the order's charge path, each request bounded by the
	// attempt timeout, and returns how it ended (with the wait a 429 asks for).
	charge(ctx context.Context, t *tally, o *trackedOrder) (outcome, time.Duration, error)
	// settle asks the provider whether o was charged.
	settle(ctx context.Context, t *tally, o *trackedOrder) (bool, error)
}

// kind is what a provider request does.
type kind int

const (
	kindCharge kind = iota // moves money: a create with confirm, a confirm
	kindCreate             // creates an intent unconfirmed: moves none
	kindLookup             // reads: a page of the list, a retrieve
	kinds
)

// tally records every provider request written, by kind and time, and the 429s answered.
type tally struct {
	mu        sync.Mutex
	sent      [kinds][]time.Time
	throttled int
}

// track returns ctx whose requests to the provider are recorded as k once written: the
// http.Transport's own account, so a request that timed out waiting for a connection is
// not counted, and every page of a lookup is.
func (t *tally) track(ctx context.Context, k kind) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err != nil {
			return
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		t.sent[k] = append(t.sent[k], time.Now())
	}})
}

func (t *tally) count(k kind, in window) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, at := range t.sent[k] {
		if in.holds(at) {
			n++
		}
	}
	return n
}

// window is a span of time; a zero bound is open.
type window struct{ from, to time.Time }

func (w window) holds(t time.Time) bool {
	return (w.from.IsZero() || !t.Before(w.from)) && (w.to.IsZero() || !t.After(w.to))
}

// load runs orders open loop: each starts when due, whether or not earlier ones have
// finished, and makes one attempt of d's charge path, sending a throttled request again
// after the wait its 429 asked for. hang, if not nil, is when the provider hangs.
func load(ctx context.Context, d design, orders []*trackedOrder, hang *window) (Phase, error) {
	if err := d.prepare(ctx, orders); err != nil {
		return Phase{}, err
	}
	t := &tally{}
	var wg sync.WaitGroup
	var lag time.Duration
	for _, o := range orders {
		if wait := time.Until(o.due); wait > 0 {
			time.Sleep(wait) // the schedule: a timer per order would be the same
		}
		lag = max(lag, time.Since(o.due))
		wg.Go(func() { chargeOrder(ctx, t, d, o) })
	}
	wg.Wait()
	p := newPhase(t, orders, hang)
	p.MaxLag = lag
	for _, o := range orders {
		if o.err != nil {
			return p, o.err
		}
	}
	return p, nil
}

func chargeOrder(ctx context.Context, t *tally, d design, o *trackedOrder) {
	for {
		o.lastAttempt = time.Now()
		out, wait, err := d.charge(ctx, t, o)
		if out != throttled || err != nil || ctx.Err() != nil {
			o.outcome, o.err, o.done = out, err, time.Now()
			return
		}
		t.mu.Lock()
		t.throttled++
		t.mu.Unlock()
		time.Sleep(wait)
	}
}

// settle looks up every order whose outcome is unknown, settlers at once, each until the
// provider answers, and records what it cost.
func (p *Phase) settle(ctx context.Context, d design, orders []*trackedOrder, settlers int) {
	t := &tally{}
	began := time.Now()
	work := make(chan *trackedOrder)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range settlers {
		wg.Go(func() {
			for o := range work {
				for ctx.Err() == nil {
					lookupCtx, cancel := context.WithTimeout(ctx, time.Minute)
					charged, err := d.settle(lookupCtx, t, o)
					cancel()
					mu.Lock()
					switch {
					case err != nil:
						p.Settle.Failed++
					case charged:
						o.outcome = paid
						p.Settle.FoundCharged++
					default:
						o.outcome = notCharged
					}
					mu.Unlock()
					if err == nil {
						break
					}
					time.Sleep(100 * time.Millisecond) // a failed lookup proves nothing: ask again
				}
			}
		})
	}
	for _, o := range orders {
		if o.outcome == unknown {
			work <- o
		}
	}
	close(work)
	wg.Wait()
	p.Settle.Requests = t.count(kindLookup, window{})
	p.Settle.Took = time.Since(began)
}
