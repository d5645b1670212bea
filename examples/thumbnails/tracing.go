package main

import (
	"context"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	shareqotel "github.com/shareq/shareq/shareqotel"
)

// serviceName is the service.name of the spans the program exports.
const serviceName = "thumbnails"

// startTracing exports spans over OTLP/HTTP to endpoint (a URL; without a
// path, the collector's /v1/traces) and returns the telemetry that traces
// the jobs, and the function that flushes what is left and stops the
// exporter.
func startTracing(ctx context.Context, endpoint string) (*shareqotel.Telemetry, string, func(context.Context) error, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", nil, fmt.Errorf("-otlp %q: want an http:// or https:// URL", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, "", nil, fmt.Errorf("otlp exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", serviceName))))
	tel, err := shareqotel.New(shareqotel.TracerProvider(tp), shareqotel.Propagator(propagation.TraceContext{}))
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, "", nil, err
	}
	return tel, u.String(), tp.Shutdown, nil
}
