// Package tracing exports OpenTelemetry traces over OTLP/HTTP when
// server.tracing.otlp_endpoint is set: one span per HTTP request (with its
// request id and tenant) and one per execution below it. Without an
// endpoint every tracer is a no-op and nothing is sent.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Setup returns the tracer of forge's spans and the function that flushes
// and stops the exporter. endpoint "" gives a no-op tracer.
func Setup(ctx context.Context, endpoint, version string) (trace.Tracer, func(context.Context) error, error) {
	if endpoint == "" {
		return noop.NewTracerProvider().Tracer("forge"), func(context.Context) error { return nil }, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("server.tracing.otlp_endpoint %q: want http(s)://host:port[/path]", endpoint)
	}
	if strings.Trim(u.Path, "/") == "" {
		u.Path = "/v1/traces" // the OTLP/HTTP default
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("forge"), semconv.ServiceVersion(version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp.Tracer("forge"), tp.Shutdown, nil
}
