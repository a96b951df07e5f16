package resilience

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/sony/gobreaker/v2"
)

// The benchmarks put the protected stack side by side with a bare call and
// with raw gobreaker, on the closed path and while rejecting. Run:
//
//	go test -run='^$' -bench=. -benchmem -count=6 ./internal/resilience
//
// What the closed path allocates (16 allocs, 1208 B per call, with the
// default abandoned-call hold):
//   - 1 × 48 B: the done closure gobreaker's TwoStepCircuitBreaker.Allow
//     returns; inherent to the two-step API, which the slow-call rule needs.
//   - the call's tracker, its timer and the timer's callback: a sync.Pool
//     saved them, at the price of a recycled tracker racing its own timer.
//   - the attempt (send): the goroutine a call runs on, so that one given
//     up on can run on until answered (L3), its three channels, its
//     detached context with the hold's deadline, and the attempt's timer.
//
// The bulkhead is a channel semaphore and metric children are looked up at
// construction. Rejecting while open allocates nothing: the errors are sentinels.

var sink int

func bareCall(context.Context) (int, error) { return 1, nil }

// benchSerialAndParallel runs call as a serial and as a parallel benchmark.
func benchSerialAndParallel(b *testing.B, call func(context.Context) error) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := call(ctx); err != nil && !isRejection(err) {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(ctx); err != nil && !isRejection(err) {
					b.Error(err)
					return
				}
			}
		})
	})
}

func isRejection(err error) bool {
	return errors.Is(err, ErrOpen) || errors.Is(err, gobreaker.ErrOpenState)
}

func benchPolicy(b *testing.B, open bool, fixed bool) *Policy {
	b.Helper()
	cfg := DefaultConfig()
	if fixed {
		cfg.LimitInitial, cfg.LimitMin, cfg.LimitMax = 4, 4, 4
	}
	cfg.OpenDuration = 1 << 62 // stays open for the whole benchmark
	cfg.MinCalls, cfg.WindowSize = 1, 1
	p, err := New("bench", cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if open {
		_, _ = Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("down") })
		if got := p.State(); got != StateOpen {
			b.Fatalf("state = %v, want open", got)
		}
	}
	return p
}

func BenchmarkClosed(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		benchSerialAndParallel(b, func(ctx context.Context) error {
			v, err := bareCall(ctx)
			sink += v
			return err
		})
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[int](gobreaker.Settings{Name: "bench"})
		benchSerialAndParallel(b, func(ctx context.Context) error {
			_, err := cb.Execute(func() (int, error) { return bareCall(ctx) })
			return err
		})
	})
	for _, limit := range []string{"fixed", "adaptive"} {
		b.Run("breaker+"+limit, func(b *testing.B) {
			// The layers failsafe-go's breaker + bulkhead (or adaptive
			// limiter) composition covers, without retry and per-attempt
			// timeout, for a like-for-like figure.
			p := benchPolicy(b, false, limit == "fixed")
			benchSerialAndParallel(b, func(ctx context.Context) error {
				c, err := p.breaker.allow()
				if err != nil {
					return err
				}
				if err := p.limit.acquire(ctx); err != nil {
					c.finish(errReportExcluded, p.breaker.calls.rejected)
					return err
				}
				c.startClock()
				_, err = bareCall(ctx)
				s := noSignal
				if c.finish(nil, p.breaker.calls.success) {
					s = healthy
				}
				p.limit.release(s)
				return err
			})
		})
	}

	b.Run("protected", func(b *testing.B) { benchProtected(b, false, false) })
	b.Run("protected-fixed", func(b *testing.B) { benchProtected(b, false, true) })
}

func BenchmarkOpen(b *testing.B) {
	b.Run("gobreaker", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[int](gobreaker.Settings{
			Name:        "bench",
			Timeout:     1 << 62,
			ReadyToTrip: func(gobreaker.Counts) bool { return true },
		})
		_, _ = cb.Execute(func() (int, error) { return 0, errors.New("down") })
		benchSerialAndParallel(b, func(ctx context.Context) error {
			_, err := cb.Execute(func() (int, error) { return bareCall(ctx) })
			return err
		})
	})
	b.Run("protected", func(b *testing.B) { benchProtected(b, true, false) })
}

// benchProtected measures Do with every layer, the breaker closed or open.
func benchProtected(b *testing.B, open, fixed bool) {
	p := benchPolicy(b, open, fixed)
	benchSerialAndParallel(b, func(ctx context.Context) error {
		_, err := Do(ctx, p, bareCall)
		return err
	})
}

// BenchmarkLimit measures the concurrency limit alone, acquire and release
// around a bare call: the cost the limit adds to the closed path.
func BenchmarkLimit(b *testing.B) {
	for _, limit := range []string{"fixed", "adaptive"} {
		b.Run(limit, func(b *testing.B) {
			p := benchPolicy(b, false, limit == "fixed")
			benchSerialAndParallel(b, func(ctx context.Context) error {
				if err := p.limit.acquire(ctx); err != nil {
					return err
				}
				v, err := bareCall(ctx)
				sink += v
				p.limit.release(healthy)
				return err
			})
		})
	}
}
