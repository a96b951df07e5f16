package envconfig

import (
	"strings"

	"github.com/resilientcheckout/checkout/internal/telemetry"
)

// Tracing reads the standard OpenTelemetry variables for a process whose
// service name defaults to service. The rule, also in the README:
//
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none: no exporter.
//   - OTEL_TRACES_EXPORTER=otlp: OTLP over HTTP to the endpoint below, or
//     to the specification's default http://localhost:4318/v1/traces.
//   - OTEL_TRACES_EXPORTER unset: OTLP when an endpoint is set, else no
//     exporter. (The specification's default is otlp; a template that
//     exported to localhost by default would log export errors on every
//     machine without a collector.)
//
// The endpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, or
// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended. Only the
// http/protobuf protocol is built in: OTEL_EXPORTER_OTLP_PROTOCOL=grpc is an
// error, as is any exporter, sampler or flag this code would otherwise
// ignore. Without an exporter the process uses OpenTelemetry's no-op
// provider.
//
// The SDK reads the remaining OTEL_* variables (OTEL_RESOURCE_ATTRIBUTES,
// OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_BSP_*) from
// the process environment itself.
func (r *Reader) Tracing(service string) telemetry.TracingConfig {
	cfg := telemetry.TracingConfig{
		Exporter:    r.OneOf("OTEL_TRACES_EXPORTER", "", telemetry.ExporterOTLP, telemetry.ExporterNone),
		ServiceName: r.String("OTEL_SERVICE_NAME", service),
		Sampler:     r.OneOf("OTEL_TRACES_SAMPLER", "parentbased_always_on", telemetry.Samplers...),
	}
	if strings.HasSuffix(cfg.Sampler, "traceidratio") {
		cfg.SamplerArg = r.Float("OTEL_TRACES_SAMPLER_ARG", 1, 0, 1)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		r.OneOf(name, "http/protobuf", "http/protobuf")
	}
	if r.lookup("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		cfg.Endpoint = r.URL("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", "http", "https")
	} else if base := r.OptionalURL("OTEL_EXPORTER_OTLP_ENDPOINT", "http", "https"); base != "" {
		cfg.Endpoint = strings.TrimRight(base, "/") + "/v1/traces"
	}
	if cfg.Exporter == "" && cfg.Endpoint != "" {
		cfg.Exporter = telemetry.ExporterOTLP
	}
	if cfg.Exporter == telemetry.ExporterOTLP && cfg.Endpoint == "" {
		cfg.Endpoint = "http://localhost:4318/v1/traces"
	}
	if r.OneOf("OTEL_SDK_DISABLED", "false", "true", "false") == "true" || cfg.Exporter == "" {
		cfg.Exporter = telemetry.ExporterNone
	}
	return cfg
}
