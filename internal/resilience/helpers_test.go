package resilience

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The fake dependency's answers. Tests run inside synctest bubbles, where
// timers run on a fake clock, so "slow" costs no real time.
var (
	errUnavailable = errors.New("503 service unavailable") // Transient
	errDeclined    = errors.New("402 card declined")       // Final
	errNoRetry     = errors.New("500, should not retry")   // Unretryable
)

// advance is the tests' "d later": inside a synctest bubble it moves the
// fake clock forward by exactly d at once — time.Sleep on the bubble's clock,
// no real waiting — then lets every goroutine of the bubble settle before
// the test looks at the breaker. Call it from the bubble's root goroutine.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func classify(err error) Class {
	switch {
	case errors.Is(err, errDeclined):
		return Final
	case errors.Is(err, errNoRetry):
		return Unretryable
	}
	return Transient
}

type step int

const (
	ok step = iota
	fail
	decline
	slowOK // succeeds after 450 ms, past the 400 ms threshold
	hang   // returns only when its context ends
)

func (s step) call(ctx context.Context) (string, error) {
	switch s {
	case fail:
		return "", errUnavailable
	case decline:
		return "", errDeclined
	case slowOK:
		<-time.After(450 * time.Millisecond)
	case hang:
		<-ctx.Done()
		return "", fmt.Errorf("post charge: %w", ctx.Err())
	}
	return "ch_1", nil
}

// answersIn is a dependency that answers after d on the bubble's clock, or
// gives up when its caller does.
func answersIn(d time.Duration) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		select {
		case <-time.After(d):
			return "ch_1", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// probeAnswersIn is answersIn as a probe (Options.Probe).
func probeAnswersIn(d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := answersIn(d)(ctx)
		return err
	}
}

// bundle is what setup returns: a policy, its metrics, and the breaker
// transitions it logged.
type bundle struct {
	p     *Policy
	m     *Metrics
	trans *transitions
}

// setup builds a policy from DefaultConfig, changed by edit, with a 1 s
// open duration, and jitter and the abandoned-call hold off, unless edit
// sets them (hold_test.go tests the hold). Call it inside the synctest bubble.
func setup(t *testing.T, edit func(*Config)) bundle {
	t.Helper()
	cfg := DefaultConfig()
	cfg.OpenDuration = time.Second
	cfg.OpenJitter = 0
	cfg.AbandonedHold = 0
	if edit != nil {
		edit(&cfg)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tr := &transitions{}
	p, err := New("payment", cfg, Options{
		Classify: classify,
		Metrics:  m,
		Logger:   slog.New(tr),
		Rand:     func(n int64) int64 { return n - 1 }, // the longest jitter and backoff
	})
	if err != nil {
		t.Fatal(err)
	}
	// Calls given up on run on until the hold ends (send): let it, or the
	// bubble would end with them still waiting.
	t.Cleanup(func() { advance(cfg.AbandonedHold) })
	return bundle{p: p, m: m, trans: tr}
}

func (b bundle) do(s step) (string, error) {
	return Do(context.Background(), b.p, s.call)
}

// calls returns resilience_calls_total for one outcome.
func (b bundle) calls(t *testing.T, outcome string) int {
	t.Helper()
	return int(counterValue(t, b.m.calls.WithLabelValues(b.p.Name(), outcome)))
}

func counterValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// transitions is a slog.Handler that keeps the breaker's state-change
// records, with the fake time they were logged at.
type transitions struct {
	mu      sync.Mutex
	records []transition
	msgs    map[string]int // every message logged, counted
}

// logged counts the records logged with message msg.
func (h *transitions) logged(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.msgs[msg]
}

type transition struct {
	at                         time.Time
	from, to                   string
	calls, failures, slowCalls int64
}

func (h *transitions) Enabled(context.Context, slog.Level) bool { return true }
func (h *transitions) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *transitions) WithGroup(string) slog.Handler            { return h }

func (h *transitions) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	if h.msgs == nil {
		h.msgs = map[string]int{}
	}
	h.msgs[r.Message]++
	h.mu.Unlock()
	if r.Message != "circuit breaker state changed" {
		return nil
	}
	tr := transition{at: r.Time}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "from":
			tr.from = a.Value.String()
		case "to":
			tr.to = a.Value.String()
		case "window_calls":
			tr.calls = a.Value.Int64()
		case "window_failures":
			tr.failures = a.Value.Int64()
		case "window_slow":
			tr.slowCalls = a.Value.Int64()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, tr)
	return nil
}

func (h *transitions) all() []transition {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]transition(nil), h.records...)
}
