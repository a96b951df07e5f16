package envconfig_test

import (
	"strings"
	"testing"

	"github.com/resilientcheckout/checkout/internal/envconfig"
	"github.com/resilientcheckout/checkout/internal/telemetry"
)

func TestTracing(t *testing.T) {
	t.Parallel()
	none := telemetry.TracingConfig{Exporter: telemetry.ExporterNone, ServiceName: "checkout", Sampler: "parentbased_always_on"}
	otlp := func(endpoint string) telemetry.TracingConfig {
		c := none
		c.Exporter, c.Endpoint = telemetry.ExporterOTLP, endpoint
		return c
	}
	tests := []struct {
		name string
		env  map[string]string
		want telemetry.TracingConfig
	}{
		{"nothing set: no exporter", nil, none},
		{"an endpoint turns OTLP on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, otlp("http://jaeger:4318/v1/traces")},
		{"the traces endpoint is used as given", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/x", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318/"}, otlp("http://c:4318/x")},
		{"otlp without an endpoint: the default one", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, otlp("http://localhost:4318/v1/traces")},
		{"none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, func() telemetry.TracingConfig {
			c := none
			c.Endpoint = "http://jaeger:4318/v1/traces"
			return c
		}()},
		{"the SDK switched off", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, func() telemetry.TracingConfig {
			c := otlp("http://localhost:4318/v1/traces")
			c.Exporter = telemetry.ExporterNone
			return c
		}()},
		{"service name and sampler", map[string]string{"OTEL_SERVICE_NAME": "shop", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, func() telemetry.TracingConfig {
			c := none
			c.ServiceName, c.Sampler, c.SamplerArg = "shop", "parentbased_traceidratio", 0.25
			return c
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := envconfig.New(func(k string) string { return tt.env[k] })
			got := r.Tracing("checkout")
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Tracing() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestTracingRejectsWhatItWouldIgnore: a value the code cannot honour fails
// at start, naming the variable.
func TestTracingRejectsWhatItWouldIgnore(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		"OTEL_TRACES_EXPORTER":               "jaeger",
		"OTEL_TRACES_SAMPLER":                "sometimes",
		"OTEL_EXPORTER_OTLP_PROTOCOL":        "grpc",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "jaeger:4318",
		"OTEL_SDK_DISABLED":                  "yes",
	} {
		r := envconfig.New(func(k string) string {
			if k == name {
				return value
			}
			return ""
		})
		r.Tracing("checkout")
		if err := r.Err(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: error %v, want one naming %s", name, value, err, name)
		}
	}
	r := envconfig.New(func(k string) string {
		return map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}[k]
	})
	r.Tracing("checkout")
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER_ARG") {
		t.Errorf("OTEL_TRACES_SAMPLER_ARG=2: error %v, want one naming it", err)
	}
}
