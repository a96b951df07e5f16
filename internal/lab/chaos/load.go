package chaos

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Request kinds of the load.
const (
	RequestNew      = "new"      // a unique key, a card that pays
	RequestDecline  = "decline"  // a unique key, pm_card_chargeDeclined
	RequestReplay   = "replay"   // the key and body of an acknowledged request, sent again
	RequestMismatch = "mismatch" // the key of an acknowledged request with another body: 422
	RequestRetry    = "retry"    // the key and body of a request that got no answer or a 503, sent again
)

// Exchange is one POST /orders and what came back.
type Exchange struct {
	Seq  int
	Kind string
	// Of is the Seq of the exchange a replay, mismatch or retry repeats.
	Of   int
	Key  string
	Body []byte
	Sent time.Duration // since the load's start
	// Answered is when its answer (or its error) came back, since the
	// load's start.
	Answered time.Duration
	// Crashes is how many Postgres crashes and failovers had begun when it
	// was sent.
	Crashes int

	Status   int    // 0: no HTTP answer (Err says why)
	Err      string // transport error
	Answer   []byte
	Replayed bool // Idempotent-Replayed: true
	Location string
	OrderID  string // the order a 201, 202 or 402 names
}

// Acknowledged reports whether the answer promised the order exists:
// the 201, 202 and 402 of docs/design.md, "Checkout API".
func (x Exchange) Acknowledged() bool {
	switch x.Status {
	case http.StatusCreated, http.StatusAccepted, http.StatusPaymentRequired:
		return true
	}
	return false
}

// LoadConfig shapes the load.
type LoadConfig struct {
	Seed uint64
	Rate float64 // requests per second, open loop
	// Shares of replays, mismatches, retries and declines among requests, 0
	// to 1; the rest are new orders that pay.
	Replays, Mismatches, Retries, Declines float64
	// Timeout is the client's patience; longer than checkout's longest
	// request (7 s by default), so nearly every request gets its answer.
	Timeout time.Duration
	// MaxInFlight bounds the client's concurrency; a request due while it is
	// reached is skipped and counted, so the load stays open-loop.
	MaxInFlight int
}

// Load sends orders at a fixed rate, whatever the service does, and keeps
// every exchange for the audit.
type Load struct {
	cfg      LoadConfig
	checkout func() string // checkout's current base URL: it moves when restarted
	crashes  func() int
	client   *http.Client
	started  atomic.Pointer[time.Time]

	mu        sync.Mutex
	exchanges []Exchange
	acked     []int // Seqs of acknowledged first answers, replay candidates
	unsure    []int // Seqs of new and decline exchanges without an answer or with a 503, retry candidates
	skipped   atomic.Int64
}

// NewLoad returns a load against the checkout whose URL checkout returns;
// crashes counts the Postgres crashes and failovers so far (see
// Exchange.Crashes).
func NewLoad(cfg LoadConfig, checkout func() string, crashes func() int) *Load {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = cfg.MaxInFlight, cfg.MaxInFlight
	return &Load{cfg: cfg, checkout: checkout, crashes: crashes, client: &http.Client{Transport: t, Timeout: cfg.Timeout}}
}

// Run sends requests until ctx ends, then waits for the answers still due.
func (l *Load) Run(ctx context.Context) {
	rng := rand.New(rand.NewPCG(l.cfg.Seed, 0x6c6f6164)) // "load"
	start := time.Now()
	l.started.Store(&start)
	interval := time.Duration(float64(time.Second) / l.cfg.Rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	sem := make(chan struct{}, l.cfg.MaxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		x := l.next(rng, seq)
		x.Sent, x.Crashes = time.Since(start), l.crashes()
		select {
		case sem <- struct{}{}:
		default:
			l.skipped.Add(1)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			l.send(&x)
			x.Answered = time.Since(start)
			l.record(x)
		})
	}
}

// next draws the request with sequence number seq.
func (l *Load) next(rng *rand.Rand, seq int) Exchange {
	x := Exchange{Seq: seq, Kind: RequestNew, Key: fmt.Sprintf("chaos-%d", seq)}
	r := rng.Float64()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.acked) > 0 && r < l.cfg.Replays+l.cfg.Mismatches {
		of := l.exchanges[l.acked[rng.IntN(len(l.acked))]]
		x.Of, x.Key, x.Body, x.Kind = of.Seq, of.Key, of.Body, RequestReplay
		if r >= l.cfg.Replays {
			x.Kind, x.Body = RequestMismatch, bytes.Replace(of.Body, []byte(`"quantity":`), []byte(`"quantity":1`), 1)
		}
		return x
	}
	if len(l.unsure) > 0 && r < l.cfg.Replays+l.cfg.Mismatches+l.cfg.Retries {
		// A client that got no answer, or a 503, tries again with its key:
		// the request resumes the order if its first one died.
		of := l.exchanges[l.unsure[rng.IntN(len(l.unsure))]]
		x.Of, x.Key, x.Body, x.Kind = of.Seq, of.Key, of.Body, RequestRetry
		return x
	}
	pm := "pm_card_visa"
	if rng.Float64() < l.cfg.Declines {
		x.Kind, pm = RequestDecline, "pm_card_chargeDeclined"
	}
	x.Body = orderBody(rng, seq, pm)
	return x
}

func orderBody(rng *rand.Rand, seq int, paymentMethod string) []byte {
	type item struct {
		SKU       string `json:"sku"`
		Quantity  int    `json:"quantity"`
		UnitPrice int    `json:"unit_price"`
	}
	items := make([]item, 1+rng.IntN(3))
	for i := range items {
		items[i] = item{SKU: fmt.Sprintf("SKU-%d", rng.IntN(50)), Quantity: 1 + rng.IntN(5), UnitPrice: 100 + rng.IntN(10_000)}
	}
	body, _ := json.Marshal(struct {
		CustomerID    string `json:"customer_id"`
		Currency      string `json:"currency"`
		PaymentMethod string `json:"payment_method"`
		Items         []item `json:"items"`
	}{fmt.Sprintf("cus_chaos_%d", seq%97), []string{"USD", "EUR", "GBP"}[rng.IntN(3)], paymentMethod, items})
	return body
}

func (l *Load) send(x *Exchange) {
	req, err := http.NewRequest(http.MethodPost, l.checkout()+"/orders", bytes.NewReader(x.Body))
	if err != nil {
		x.Err = err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", x.Key)
	resp, err := l.client.Do(req)
	if err != nil {
		x.Err = err.Error()
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		x.Err = "read answer: " + err.Error()
		return
	}
	x.Status, x.Answer = resp.StatusCode, answer
	x.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	x.Location = resp.Header.Get("Location")
	if x.Acknowledged() {
		var named struct {
			ID      string `json:"id"`       // order (201, 202)
			OrderID string `json:"order_id"` // problem (402)
		}
		_ = json.Unmarshal(answer, &named) // an answer without an id is the audit's to report
		x.OrderID = cmp.Or(named.ID, named.OrderID)
	}
}

func (l *Load) record(x Exchange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.exchanges) <= x.Seq {
		l.exchanges = append(l.exchanges, Exchange{Seq: len(l.exchanges), Status: -1})
	}
	l.exchanges[x.Seq] = x
	first := x.Kind == RequestNew || x.Kind == RequestDecline
	switch {
	case x.Acknowledged() && (first || x.Kind == RequestRetry):
		l.acked = append(l.acked, x.Seq)
	case first && (x.Status == 0 || x.Status == http.StatusServiceUnavailable):
		l.unsure = append(l.unsure, x.Seq)
	}
}

// Exchanges returns every exchange that was sent, by Seq (skipped ones are
// left out). Call it once Run has returned.
func (l *Load) Exchanges() []Exchange {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Exchange
	for _, x := range l.exchanges {
		if x.Status != -1 {
			out = append(out, x)
		}
	}
	return out
}

// Since is t in the load's time (that of Exchange.Sent): how long after
// the load's start t was. It is zero before Run has started.
func (l *Load) Since(t time.Time) time.Duration {
	start := l.started.Load()
	if start == nil {
		return 0
	}
	return t.Sub(*start)
}

// Skipped counts requests not sent because MaxInFlight were outstanding.
func (l *Load) Skipped() int64 { return l.skipped.Load() }
