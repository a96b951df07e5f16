package resilience

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// The policy's decisions are events on the caller's span, so that a trace
// says why a call never reached the dependency or was made twice.

// rejectionReason names a refusal for the "resilience.rejected" event.
func rejectionReason(err error) string {
	switch {
	case errors.Is(err, ErrOpen):
		return "breaker_open"
	case errors.Is(err, ErrTooManyRequests):
		return "breaker_half_open_full"
	case errors.Is(err, ErrBulkheadFull):
		return "limit_full"
	case errors.Is(err, ErrProbeFailed):
		return "probe_failed"
	}
	return "other"
}

// traceRejected records that the stack turned attempt n away.
func traceRejected(ctx context.Context, p *Policy, n int, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("resilience.rejected", trace.WithAttributes(
		attribute.String("resilience.name", p.name),
		attribute.String("resilience.reason", rejectionReason(err)),
		attribute.Int("resilience.attempt", n),
		attribute.Int64("resilience.retry_after_ms", p.RetryAfter().Milliseconds()),
	))
}

// traceRetry records that attempt n failed and another follows after delay.
func traceRetry(ctx context.Context, p *Policy, n int, delay time.Duration, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("resilience.retry", trace.WithAttributes(
		attribute.String("resilience.name", p.name),
		attribute.Int("resilience.attempt", n+1),
		attribute.Int64("resilience.backoff_ms", delay.Milliseconds()),
		attribute.String("error", err.Error()),
	))
}
