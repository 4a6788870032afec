// Package tracing is the daemon's OpenTelemetry SDK: the tracer provider,
// its sampler and the OTLP/HTTP exporter that sends spans to the collector
// daemon { traces = "…" } names. The rest of skillbox does not import the
// SDK: the front ends start a call's root span with the trace.Tracer they
// are given, and lower packages start child spans with span.Start (package
// span imports the otel API only), which records nothing unless the context
// carries a span of a traced call. Without daemon.traces no tracer exists,
// and a call's cost is that nil check.
//
// Span names and attributes are bounded: the method or tool, the skill's
// name, the script's path in the skill, the runtime, warm or cold, the
// reason a run ended and its exit code; never env values, args, stdin or
// file contents.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime/span"
)

// ServiceName is the service.name of every span skillbox sends.
const ServiceName = "skillbox"

// exportTimeout bounds one export to the collector, so an absent collector
// costs the daemon a log line, not a stuck goroutine.
const exportTimeout = 10 * time.Second

// Tracing is the daemon's tracer provider. Its Tracer starts the root
// span of a call; Shutdown sends what is buffered.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// Options make a Tracing.
type Options struct {
	// Endpoint is the collector (policy.TracesEndpoint), used unless
	// Exporter is set.
	Endpoint policy.TracesEndpoint
	// Sample is the share of calls traced, 0 < Sample <= 1.
	Sample float64
	// Version is the daemon's version (service.version).
	Version string
	// Exporter, when set, receives the spans instead of the collector
	// (tests); Sync sends each span as it ends rather than in batches.
	Exporter sdktrace.SpanExporter
	Sync     bool
	// Logger, when set, hears the SDK's errors (a failed export); the
	// SDK's handler is process-wide, and the daemon has one tracer.
	Logger hclog.Logger
}

// New makes the tracer provider daemon.traces asks for. It does not
// connect: a collector that is down costs failed exports (logged by the
// SDK's error handler), never a run.
func New(o Options) (*Tracing, error) {
	if o.Sample <= 0 || o.Sample > 1 {
		return nil, fmt.Errorf("traces sample %g: must be above 0 and at most 1", o.Sample)
	}
	exp := o.Exporter
	if exp == nil {
		if !o.Endpoint.Enabled() {
			return nil, errors.New("traces: no collector endpoint (daemon.traces) and no exporter")
		}
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(o.Endpoint.URL), otlptracehttp.WithTimeout(exportTimeout)}
		if o.Endpoint.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		var err error
		if exp, err = otlptracehttp.New(context.Background(), opts...); err != nil {
			return nil, fmt.Errorf("traces exporter for %s: %w", o.Endpoint, err)
		}
	}
	if o.Logger != nil {
		log := o.Logger
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("sending traces failed", "error", err) }))
	}
	res := resource.NewSchemaless(attribute.String("service.name", ServiceName), attribute.String("service.version", o.Version))
	popt := sdktrace.WithBatcher(exp)
	if o.Sync {
		popt = sdktrace.WithSyncer(exp)
	}
	tp := sdktrace.NewTracerProvider(popt, sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.Sample))))
	return &Tracing{tp: tp}, nil
}

// Tracer is the tracer the front ends start a call's root span with.
func (t *Tracing) Tracer() trace.Tracer { return t.tp.Tracer(span.InstrumentationName) }

// Shutdown sends the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("flushing traces: %w", err)
	}
	return nil
}
