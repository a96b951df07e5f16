package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/resilientcheckout/checkout/internal/resilience"
)

// declinedError stands for the payment client's "card declined" answer: a
// final business outcome, not provider trouble.
type declinedError struct{ reason string }

func (e *declinedError) Error() string { return "declined: " + e.reason }

// classify is what the payment client passes as Options.Classify: a decline
// is the provider working, so it must neither trip the breaker nor be
// retried; everything else (5xx, 429, connection errors) is transient.
func classify(err error) resilience.Class {
	var d *declinedError
	if errors.As(err, &d) {
		return resilience.Final
	}
	return resilience.Transient
}

// Protect a dependency: one Policy per dependency, built once at start-up
// from DefaultConfig (overridden from the environment), every call through
// Do.
func Example() {
	reg := prometheus.NewRegistry()
	metrics, err := resilience.NewMetrics(reg) // once per registry, shared
	if err != nil {
		panic(err)
	}
	payment, err := resilience.New("payment", resilience.DefaultConfig(), resilience.Options{
		Classify: classify,
		Metrics:  metrics,
	})
	if err != nil {
		panic(err)
	}

	chargeID, err := resilience.Do(context.Background(), payment, func(ctx context.Context) (string, error) {
		// Here the payment client posts the charge with ctx, which carries
		// the per-attempt timeout.
		return "ch_123", nil
	})
	fmt.Println(chargeID, err)
	// Output: ch_123 <nil>
}

// Turn the typed result into a fallback decision. A breaker rejection says
// how long to wait before the next try, for Retry-After or to schedule the
// background job. Here the first attempt fails and trips the breaker, so
// the retry is refused; the error keeps both.
func ExampleDo_fallback() {
	cfg := resilience.DefaultConfig()
	cfg.WindowSize, cfg.MinCalls = 1, 1 // trip on the first failure, for the example
	cfg.OpenJitter = 0
	payment, err := resilience.New("payment", cfg, resilience.Options{
		Classify: classify,
		Logger:   slog.New(slog.DiscardHandler), // keep transition logs out of the example
	})
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context) (string, error) { return "", errors.New("provider: 503") }

	for range 2 {
		_, err := resilience.Do(context.Background(), payment, charge)
		switch {
		case err == nil:
			fmt.Println("paid")
		case errors.Is(err, resilience.ErrOpen), errors.Is(err, resilience.ErrTooManyRequests):
			fmt.Printf("%v\n  breaker %v: accept the order, charge it in %v\n",
				err, payment.State(), payment.RetryAfter().Round(100*time.Millisecond))
		case errors.Is(err, resilience.ErrBulkheadFull), errors.Is(err, resilience.ErrTimeout):
			fmt.Println("concurrency limit reached or provider slow: accept the order, charge it later")
		default:
			fmt.Println("provider failed:", err)
		}
	}
	// Output:
	// resilience: circuit breaker is open (attempt 2); attempt 1: provider: 503
	//   breaker open: accept the order, charge it in 500ms
	// resilience: circuit breaker is open
	//   breaker open: accept the order, charge it in 500ms
}

// A decline comes back unchanged, reachable with errors.As, and is neither
// retried nor counted against the provider.
func ExampleDo_decline() {
	payment, err := resilience.New("payment", resilience.DefaultConfig(), resilience.Options{Classify: classify})
	if err != nil {
		panic(err)
	}
	attempts := 0
	_, err = resilience.Do(context.Background(), payment, func(ctx context.Context) (string, error) {
		attempts++
		return "", fmt.Errorf("charge order 42: %w", &declinedError{reason: "insufficient funds"})
	})
	var d *declinedError
	fmt.Println(errors.As(err, &d), d.reason, attempts, payment.State())
	// Output: true insufficient funds 1 closed
}

// The adaptive limit, the default, grows while healthy calls press on it
// and halves the moment a call runs past the slow threshold, while that
// call is still in flight: a hung provider shrinks it before any call to it
// has returned.
func ExamplePolicy_Limit() {
	cfg := resilience.DefaultConfig() // adaptive: starts at 4, moves between 1 and 20
	cfg.MaxAttempts = 1
	payment, err := resilience.New("payment", cfg, resilience.Options{Classify: classify})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	fmt.Println("initial limit:", payment.Limit())

	// Four charges at once take every slot; the first to complete, healthy
	// and with the limit full, adds one.
	var started, done sync.WaitGroup
	release := make(chan struct{})
	for range 4 {
		started.Add(1)
		done.Go(func() {
			_, _ = resilience.Do(ctx, payment, func(context.Context) (string, error) {
				started.Done()
				<-release
				return "ch_1", nil
			})
		})
	}
	started.Wait()
	close(release)
	done.Wait()
	fmt.Println("after healthy calls that found it full:", payment.Limit())

	// A call still in flight past SlowCallThreshold halves the limit before
	// it returns: TestAdaptiveLimitShrinksWhileSlowCallsAreInFlight shows it on a
	// fake clock.
	// Output:
	// initial limit: 4
	// after healthy calls that found it full: 5
}

func ExampleParseMode() {
	for _, s := range []string{"", "timeout", "off"} {
		mode, err := resilience.ParseMode(s)
		fmt.Println(mode, err)
	}
	// Output:
	// protected <nil>
	// timeout <nil>
	// protected resilience: unknown mode "off" (want none, timeout or protected)
}
