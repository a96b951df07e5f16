package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// provider is a fake dependency whose latency the test changes while load
// runs: latency 0 hangs every call until its context ends.
type provider struct {
	mu       sync.Mutex
	latency  time.Duration
	inFlight int
	returned int // calls that have returned, however they ended
}

func (pr *provider) set(latency time.Duration) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.latency = latency
}

func (pr *provider) counts() (inFlight, returned int) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.inFlight, pr.returned
}

func (pr *provider) call(ctx context.Context) (string, error) {
	pr.mu.Lock()
	latency := pr.latency
	pr.inFlight++
	pr.mu.Unlock()
	defer func() {
		pr.mu.Lock()
		pr.inFlight--
		pr.returned++
		pr.mu.Unlock()
	}()
	var done <-chan time.Time // nil: never, a hang
	if latency > 0 {
		done = time.After(latency)
	}
	select {
	case <-done:
		return "ch_1", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// tally counts how the load's calls ended.
type tally struct {
	start             time.Time
	mu                sync.Mutex
	ok, full, breaker int
	other             int
	fullAt            []time.Duration // when calls were refused by the limit
}

func (t *tally) add(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err == nil:
		t.ok++
	case errors.Is(err, ErrBulkheadFull):
		t.full++
		t.fullAt = append(t.fullAt, time.Since(t.start))
	case errors.Is(err, ErrOpen), errors.Is(err, ErrTooManyRequests):
		t.breaker++
	default:
		t.other++
	}
}

func (t *tally) get() (ok, full, breaker, other int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ok, t.full, t.breaker, t.other
}

// load calls pr through b's policy rate times a second, each call on its
// own goroutine as an open-loop client sends them, until the returned stop
// is called, or the test ends; stop returns once every call has returned.
func (b bundle) load(t *testing.T, pr *provider, rate float64) (results *tally, stop func()) {
	results = &tally{start: time.Now()}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for {
			wg.Go(func() {
				_, err := Do(context.Background(), b.p, pr.call)
				results.add(err)
			})
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() { close(quit) })
		<-done
	}
	t.Cleanup(stop) // inside the bubble, so a failed test still ends its load
	return results, stop
}

func (b bundle) limit() int {
	limit, _ := b.p.limit.current()
	return limit
}

// The provider answers in 190 ms, so at 40 req/s 7.6 calls are in flight on
// average (Little's law) and 8 at the peaks.
const healthyLatency = 190 * time.Millisecond

func TestAdaptiveLimitGrowsUnderHealthyLoadUpToMax(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		rate         float64
		max          int
		wantLimitMin int // the limit after 3 s is in [wantLimitMin, wantLimitMax]
		wantLimitMax int
	}{
		// 10 req/s × 190 ms ≈ 2 in flight: the initial 4 is never reached,
		// so the limit has no reason to grow.
		{"light load leaves the initial limit", 10, 20, 4, 4},
		// 40 req/s × 190 ms ≈ 8 in flight at the peaks. The limit grows
		// past that during the cold start, while orders queue for the
		// slots the first completions add, and keeps what it reached: only
		// congestion lowers it.
		{"tracks rate × latency", 40, 20, 8, 12},
		// 80 req/s × 190 ms ≈ 15 in flight, capped at the maximum.
		{"stops at the maximum", 80, 10, 10, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, func(c *Config) { c.LimitMax = tt.max })
				pr := &provider{latency: healthyLatency}
				results, stop := b.load(t, pr, tt.rate)

				maxSeen := 0
				for range 60 {
					advance(50 * time.Millisecond)
					maxSeen = max(maxSeen, b.limit())
				}
				got := b.limit()
				if got < tt.wantLimitMin || got > tt.wantLimitMax {
					t.Errorf("limit after 3 s = %d, want %d to %d", got, tt.wantLimitMin, tt.wantLimitMax)
				}
				if maxSeen > tt.max {
					t.Errorf("limit reached %d, above the maximum %d", maxSeen, tt.max)
				}
				if got, want := counterValue(t, b.m.limit.WithLabelValues("payment")), float64(got); got != want {
					t.Errorf("resilience_concurrency_limit = %v, want %v", got, want)
				}
				stop()
				if _, _, breaker, other := results.get(); breaker+other > 0 {
					t.Errorf("%d breaker rejections, %d other errors under healthy load, want none", breaker, other)
				}
			})
		})
	}
}

// The cold start the initial 4 of docs/design.md, "Defaults" costs at 40 req/s: no call has
// completed in the first round trip, so no limit can know the load needs
// more; from the first completion on, each healthy call adds a slot and
// every later order gets one.
func TestAdaptiveLimitColdStartAt40PerSecond(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		pr := &provider{latency: healthyLatency}
		results, stop := b.load(t, pr, 40)
		advance(6 * time.Second)
		stop()
		ok, full, breaker, other := results.get()
		t.Logf("6 s at 40 req/s: %d charged, %d refused by the limit at %v", ok, full, results.fullAt)
		// The request due at 100 ms waits 90 ms of its 100 ms for the
		// first completion; later ones wait less.
		if full > 0 || breaker+other > 0 {
			t.Errorf("%d ok, %d refused by the limit, %d by the breaker, %d other errors; want every call made",
				ok, full, breaker, other)
		}
	})
}

func TestAdaptiveLimitShrinksWhileSlowCallsAreInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Retries off: each hung call is one call, as the provider sees it.
		b := setup(t, func(c *Config) { c.MaxAttempts, c.LimitMin = 1, 2 })
		pr := &provider{latency: healthyLatency}
		_, stop := b.load(t, pr, 40)
		advance(2 * time.Second)
		before := b.limit()
		if before < 8 {
			t.Fatalf("limit under healthy load = %d, want at least 8 to start from", before)
		}

		// The provider hangs. Healthy calls already in flight drain within
		// 190 ms and hung ones take their slots; the first of those is late
		// (1.5 × the 190 ms average) at about +0.29 s, before the breaker's
		// 400 ms slow threshold.
		pr.set(0)
		hangStart := time.Now()
		advance(healthyLatency)
		_, healthyReturned := pr.counts()
		for b.limit() == before {
			advance(time.Millisecond)
			if time.Since(hangStart) > time.Second {
				t.Fatalf("limit still %d a second into the hang", before)
			}
		}
		inFlight, returned := pr.counts()
		if returned != healthyReturned {
			t.Errorf("%d hung calls returned before the limit moved, want 0", returned-healthyReturned)
		}
		if got, want := b.limit(), before/2; got != want {
			t.Errorf("limit after the first slow call = %d, want %d (halved)", got, want)
		}
		t.Logf("limit %d → %d, %v into the hang, with %d hung calls in flight and none returned",
			before, b.limit(), time.Since(hangStart), inFlight)

		// Every later slow call halves it again, never below the minimum.
		for range 40 {
			advance(50 * time.Millisecond)
			if got := b.limit(); got < 2 {
				t.Fatalf("limit = %d, below the minimum 2", got)
			}
		}
		if got, want := b.limit(), 2; got != want {
			t.Errorf("limit after 2 s of hang = %d, want the minimum %d", got, want)
		}
		stop()
	})
}

func TestAdaptiveLimitRecoversAfterTheOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, nil)
		pr := &provider{latency: healthyLatency}
		_, stop := b.load(t, pr, 40)
		advance(2 * time.Second)
		healthyLimit := b.limit()

		pr.set(0)
		advance(3 * time.Second)
		if got, want := b.limit(), 1; got != want {
			t.Fatalf("limit after 3 s of hang = %d, want the minimum %d", got, want)
		}
		if got := b.p.State(); got == StateClosed {
			t.Fatalf("breaker %v after 3 s of hang, want it to have opened", got)
		}

		// The provider recovers: the breaker's probes succeed within its
		// next open period (at most 2 s: the second hung probe's), then
		// each healthy call adds a slot until the limit serves the load
		// again.
		pr.set(healthyLatency)
		recovered := time.Now()
		for b.p.State() != StateClosed {
			advance(10 * time.Millisecond)
			if time.Since(recovered) > 3*time.Second {
				t.Fatalf("breaker %v three seconds after recovery, want closed", b.p.State())
			}
		}
		closed := time.Now()
		for b.limit() < healthyLimit-1 {
			advance(10 * time.Millisecond)
			if time.Since(closed) > time.Second {
				t.Fatalf("limit %d a second after the breaker closed, want %d again", b.limit(), healthyLimit-1)
			}
		}
		t.Logf("limit back to %d (was %d before the outage) %v after the provider recovered, %v after the breaker closed",
			b.limit(), healthyLimit, time.Since(recovered), time.Since(closed))
		stop()
	})
}

// gated calls return what the test sends on their gate, or their context's
// error.
type gated chan error

func (g gated) call(ctx context.Context) (string, error) {
	select {
	case err := <-g:
		return "ch_1", err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func TestAdaptiveLimitIgnoresExcludedOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		end    func(g gated, cancel context.CancelFunc)
		want   int
		policy func(*Config)
	}{
		// The two controls show that the setup would move the limit: four
		// calls fill the initial limit of 4 and then end.
		// The first success completes with every slot taken and adds one.
		{"control: successes grow it", func(g gated, _ context.CancelFunc) { sendAll(g, nil) }, 5, nil},
		{"control: transient failures shrink it", func(g gated, _ context.CancelFunc) { sendAll(g, errUnavailable) }, 1, nil},
		{"declines", func(g gated, _ context.CancelFunc) { sendAll(g, errDeclined) }, 4, nil},
		{"caller cancellations", func(_ gated, cancel context.CancelFunc) { cancel() }, 4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := setup(t, func(c *Config) { c.MaxAttempts = 1 })
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				g := make(gated)
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() { _, _ = Do(ctx, b.p, g.call) })
				}
				synctest.Wait()
				if _, inFlight := b.p.limit.current(); inFlight != 4 {
					t.Fatalf("in flight = %d, want 4", inFlight)
				}
				tt.end(g, cancel)
				wg.Wait()
				if got := b.limit(); got != tt.want {
					t.Errorf("limit = %d, want %d", got, tt.want)
				}
			})
		})
	}
}

func sendAll(g gated, err error) {
	for range 4 {
		g <- err
	}
}

func TestAdaptiveLimitIgnoresRejections(t *testing.T) {
	t.Parallel()
	t.Run("by the limit", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			b := setup(t, func(c *Config) { c.MaxAttempts, c.BulkheadWait = 1, 0 })
			// Four calls hold the initial 4 slots; a fifth is turned away at
			// once.
			g := make(gated)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() { _, _ = Do(context.Background(), b.p, g.call) })
			}
			synctest.Wait()
			if _, err := b.do(ok); !errors.Is(err, ErrBulkheadFull) {
				t.Fatalf("fifth call: err = %v, want ErrBulkheadFull", err)
			}
			if got, want := b.limit(), 4; got != want {
				t.Errorf("limit after a rejection = %d, want %d", got, want)
			}
			sendAll(g, errDeclined)
			wg.Wait()
			b.expectRejected(t, map[string]float64{reasonLimit: 1, reasonOpen: 0, reasonHalfOpen: 0})
		})
	})
	t.Run("by the breaker", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			// A gentle backoff keeps the limit above its floor after the
			// ten failures that open the breaker, so a rejection that
			// counted would show.
			b := setup(t, func(c *Config) { c.MaxAttempts, c.LimitInitial, c.LimitMax, c.LimitBackoff = 1, 20, 20, 0.99 })
			for range 10 {
				_, _ = b.do(fail)
			}
			if got := b.p.State(); got != StateOpen {
				t.Fatalf("state = %v, want open", got)
			}
			before := b.limit()
			if before <= 1 {
				t.Fatalf("limit after opening = %d, want it above the floor", before)
			}
			for range 20 {
				if _, err := b.do(ok); !errors.Is(err, ErrOpen) {
					t.Fatalf("err = %v, want ErrOpen", err)
				}
			}
			if got := b.limit(); got != before {
				t.Errorf("limit after breaker rejections = %d, want %d", got, before)
			}
			b.expectRejected(t, map[string]float64{reasonLimit: 0, reasonOpen: 20, reasonHalfOpen: 0})
		})
	})
}

// expectRejected checks resilience_rejected_total by reason.
func (b bundle) expectRejected(t *testing.T, want map[string]float64) {
	t.Helper()
	for reason, n := range want {
		if got := counterValue(t, b.m.rejected.WithLabelValues("payment", reason)); got != n {
			t.Errorf("resilience_rejected_total{reason=%q} = %v, want %v", reason, got, n)
		}
	}
}

func TestStaticLimitNeverMoves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, func(c *Config) { c.LimitInitial, c.LimitMin, c.LimitMax = 6, 6, 6 })
		pr := &provider{latency: healthyLatency}
		_, stop := b.load(t, pr, 80)
		advance(time.Second)
		pr.set(0)
		advance(time.Second)
		if got, want := b.limit(), 6; got != want {
			t.Errorf("static limit = %d, want %d", got, want)
		}
		if got, want := counterValue(t, b.m.limit.WithLabelValues("payment")), 6.0; got != want {
			t.Errorf("resilience_concurrency_limit = %v, want %v", got, want)
		}
		stop()
	})
}

func TestLimiterAcquire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		wait         time.Duration
		releaseAfter time.Duration // 0: the held slot stays held
		cancelAfter  time.Duration // 0: the caller waits as long as allowed
		wantErr      error
		wantElapsed  time.Duration
	}{
		{"full, no wait: rejects at once", 0, 0, 0, ErrBulkheadFull, 0},
		{"full for the whole wait: rejects after it", 50 * time.Millisecond, 0, 0, ErrBulkheadFull, 50 * time.Millisecond},
		{"a slot frees up during the wait", 50 * time.Millisecond, 30 * time.Millisecond, 0, nil, 30 * time.Millisecond},
		{"the caller gives up while waiting", 50 * time.Millisecond, 0, 10 * time.Millisecond, context.Canceled, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		for _, maxLimit := range []int{1, 10} {
			t.Run(fmt.Sprintf("max %d/%s", maxLimit, tt.name), func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					m := testLimiterMetrics()
					l := newLimiter(1, 1, maxLimit, 0.5, tt.wait, m)
					if err := l.acquire(context.Background()); err != nil {
						t.Fatalf("first acquire = %v, want nil", err)
					}
					if tt.releaseAfter > 0 {
						time.AfterFunc(tt.releaseAfter, func() { l.release(noSignal) })
					}
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					if tt.cancelAfter > 0 {
						time.AfterFunc(tt.cancelAfter, cancel)
					}

					start := time.Now()
					err := l.acquire(ctx)
					if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
						t.Errorf("acquire = %v, want %v", err, tt.wantErr)
					}
					if got, want := time.Since(start), tt.wantElapsed; got != want {
						t.Errorf("returned after %v, want %v", got, want)
					}
					synctest.Wait()
					if _, got := l.current(); got != 1 {
						t.Errorf("in flight = %d, want 1", got)
					}
					if got := counterValue(t, m.inUse); got != 1 {
						t.Errorf("in use gauge = %v, want 1", got)
					}
					wantRejected := 0.0
					if errors.Is(tt.wantErr, ErrBulkheadFull) {
						wantRejected = 1
					}
					if got := counterValue(t, m.rejected); got != wantRejected {
						t.Errorf("rejected = %v, want %v", got, wantRejected)
					}
				})
			})
		}
	}
}

func TestLimiterServesWaitersInOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(1, 1, 1, 0.5, time.Second, testLimiterMetrics())
		if err := l.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				if err := l.acquire(context.Background()); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				l.release(noSignal)
			})
			synctest.Wait() // queue them in the order of i
		}
		l.release(noSignal)
		wg.Wait()
		if want := []int{0, 1, 2}; len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
			t.Errorf("served %v, want %v", order, want)
		}
	})
}

func testLimiterMetrics() limiterMetrics {
	return limiterMetrics{
		limit:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "limit"}),
		inUse:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "in_use"}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "rejected"}),
	}
}

// A lift over held slots stops one short of twice the maximum: with the call
// over it, what MaxConcurrency lets the HTTP client connect, as held calls
// keep their connections.
func TestALiftOverHeldSlotsStaysUnderTheConnectionCap(t *testing.T) {
	t.Parallel()
	l := newLimiter(2, 1, 2, 0.5, 0, testLimiterMetrics())
	until := time.Now().Add(time.Hour)
	for range 5 {
		l.limit = l.max * 3 // as if lifted before: every call gets a slot
		if err := l.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		l.hold(noSignal, until)
	}
	l.limit = 1
	l.recovered()
	if got, want := l.limit, 2*l.max-1; got != want {
		t.Errorf("lifted over 5 held slots: limit = %d, want %d (2 × max - 1)", got, want)
	}
}
