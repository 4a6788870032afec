// Package span is what every layer of skillbox traces with: child spans of
// the call's span in ctx, bounded attribute keys, and the trace id an
// audit record names. It imports the OpenTelemetry API only (package
// tracing owns the SDK), and costs a check of ctx when the call is not
// traced.
package span

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names skillbox's tracer.
const InstrumentationName = "github.com/skillbox/skillbox"

// Span attribute keys, bounded in what they hold.
const (
	AttrSkill    = attribute.Key("skillbox.skill")     // a skill's name
	AttrScript   = attribute.Key("skillbox.script")    // a script's path in its skill
	AttrRuntime  = attribute.Key("skillbox.runtime")   // runsc, runc, containerd, kubernetes, fake
	AttrImage    = attribute.Key("skillbox.image")     // the interpreter image's name
	AttrWarm     = attribute.Key("skillbox.warm")      // a pre-booted sandbox ran it
	AttrReason   = attribute.Key("skillbox.reason")    // why the run ended: exit, timeout, oom, …
	AttrExitCode = attribute.Key("skillbox.exit_code") // the script's exit code
	AttrEffect   = attribute.Key("skillbox.decision")  // allow, deny, confirm
	AttrRule     = attribute.Key("skillbox.rule")      // the policy rule that matched
	AttrEvent    = attribute.Key("skillbox.event")     // an audit record's event
	AttrKind     = attribute.Key("skillbox.error.kind")
)

// Start starts a child span of ctx's span, with the tracer provider that
// made it; without one (traces off, or a call not sampled) it is a no-op
// span. Lower packages call it, so they need only the otel API.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(InstrumentationName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// Annotate sets attributes on ctx's span, when it records.
func Annotate(ctx context.Context, attrs ...attribute.KeyValue) {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		s.SetAttributes(attrs...)
	}
}

// End ends s, marking it failed (with the error's kind, never its
// message, which may name files) when err is not nil.
func End(s trace.Span, err error, kind string) {
	if err != nil && s.IsRecording() {
		s.SetStatus(codes.Error, kind)
		if kind != "" {
			s.SetAttributes(AttrKind.String(kind))
		}
	}
	s.End()
}

// TraceID is the id of ctx's trace ("" when the call is not traced): what
// an audit record names.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String()
}
