package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The exporters TracingConfig.Exporter names (OTEL_TRACES_EXPORTER).
const (
	ExporterNone = "none"
	ExporterOTLP = "otlp" // OTLP over HTTP/protobuf
)

// The samplers TracingConfig.Sampler names (OTEL_TRACES_SAMPLER), as the
// OpenTelemetry specification spells them.
var Samplers = []string{
	"always_on", "always_off", "traceidratio",
	"parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio",
}

// TracingConfig is how a process exports traces. internal/envconfig reads
// it from the standard OTEL_* variables; the rule that decides between an
// exporter and none lives there (envconfig.Reader.Tracing) and in the
// docs/operations.md's Tracing section.
type TracingConfig struct {
	// Exporter is ExporterOTLP or ExporterNone.
	Exporter string
	// Endpoint is the full OTLP/HTTP traces URL, e.g.
	// http://jaeger:4318/v1/traces.
	Endpoint string
	// ServiceName is the service.name resource attribute.
	ServiceName string
	// Sampler is one of Samplers; SamplerArg is the ratio of the
	// traceidratio samplers, in [0, 1].
	Sampler    string
	SamplerArg float64
}

// Propagator carries trace context across HTTP: W3C traceparent/tracestate
// and baggage. River jobs carry traceparent in their metadata (RiverPlugin).
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Tracing is a process's tracer provider. With no exporter configured
// Provider is nil: tracing is off, the HTTP server makes no spans
// (HTTPHandler) and the other instrumentation uses OpenTelemetry's global
// provider, a no-op unless a program embedding this code installed one.
type Tracing struct {
	Provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider // nil without an exporter
}

// NewTracing builds the tracer provider cfg asks for. With an exporter, it
// also becomes OpenTelemetry's global provider and propagator, for code that
// uses the globals, and export errors are logged (as warnings: a trace
// backend that is down must not look like the service failing).
//
// Spans are exported in batches by a background goroutine: a request never
// waits for the trace backend. When the backend is unreachable the batch
// processor's queue fills and further spans are dropped, not blocked on.
func NewTracing(ctx context.Context, cfg TracingConfig, log *slog.Logger) (*Tracing, error) {
	if cfg.Exporter != ExporterOTLP {
		return &Tracing{}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	// WithFromEnv adds OTEL_RESOURCE_ATTRIBUTES; the service name comes
	// last so OTEL_SERVICE_NAME (read into cfg) or the binary's name wins.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithFromEnv(),
		resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(newSampler(cfg.Sampler, cfg.SamplerArg)),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	otel.SetErrorHandler(newErrorLog(log, time.Minute))
	return &Tracing{Provider: tp, sdk: tp}, nil
}

// errorLog logs OpenTelemetry's errors — failed exports, mostly — at most
// once per interval, counting the ones it skipped: a trace backend that is
// gone fails every batch (every 5 s by default), and the demo's compose file
// points at Jaeger even when its profile is not running.
type errorLog struct {
	log      *slog.Logger
	interval time.Duration
	mu       sync.Mutex
	last     time.Time
	skipped  int
}

func newErrorLog(log *slog.Logger, interval time.Duration) *errorLog {
	return &errorLog{log: log, interval: interval}
}

func (e *errorLog) Handle(err error) {
	e.mu.Lock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < e.interval {
		e.skipped++
		e.mu.Unlock()
		return
	}
	skipped := e.skipped
	e.last, e.skipped = now, 0
	e.mu.Unlock()
	e.log.Warn("opentelemetry: spans may be lost", "err", err, "errors_not_logged", skipped, "next_log_after", e.interval.String())
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t.sdk != nil }

// ShutdownTimeout bounds the final flush of buffered spans at shutdown, so
// an unreachable trace backend cannot hold the process up: it comes on top
// of the drain delay and the server's shutdown, inside the 10 s Docker
// gives a container between SIGTERM and SIGKILL. Measured with a backend
// that accepts connections and never answers: the process exits this much
// later than with tracing off, and requests were not slower (docs/operations.md,
// "Tracing").
const ShutdownTimeout = 2 * time.Second

// Shutdown flushes the spans still buffered and stops the exporter; it
// gives up after ShutdownTimeout. Call it after the servers have drained.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	return t.sdk.Shutdown(ctx)
}

func newSampler(name string, arg float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(arg)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(arg))
	default: // parentbased_always_on, the specification's default
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
}
