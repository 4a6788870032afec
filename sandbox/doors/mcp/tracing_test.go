package mcp_test

import (
	"context"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/mcp"
)

// TestToolCallSpans: with Options.Tracer, each tool call is one root span
// named by the tool (or "tools/call" for a name that is not one of
// skillbox's), and the service runs in its context; without a tracer
// nothing is recorded.
func TestToolCallSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	for _, tc := range []struct {
		name   string
		tracer trace.Tracer
	}{{"on", tp.Tracer("test")}, {"off", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.Ended())
			f := newFake(t)
			var inSpan trace.SpanContext
			f.run = func(ctx context.Context, p api.RunScriptParams) (*api.RunScriptResult, error) {
				inSpan = trace.SpanContextFromContext(ctx)
				return &api.RunScriptResult{RunID: "r1", Path: p.Path, Summary: outcome.Summary{Reason: "exit"}}, nil
			}
			cs := connect(t, f, mcp.Options{Caller: api.Peer{UID: 1000}, Tracer: tc.tracer}, nil)
			call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"greeter"}})
			call(t, cs, mcp.ToolRunScript, map[string]any{"path": "scripts/greet.sh", "args": []string{"Ada"}})
			if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "no_such_tool"}); err == nil {
				t.Error("an unknown tool answered")
			}
			spans := rec.Ended()[before:]
			if tc.tracer == nil {
				if len(spans) != 0 || inSpan.IsValid() {
					t.Fatalf("traces off: %d spans, service context in a span: %v", len(spans), inSpan.IsValid())
				}
				return
			}
			var names []string
			for _, s := range spans {
				names = append(names, s.Name())
				if s.Parent().IsValid() || s.SpanKind() != trace.SpanKindServer {
					t.Errorf("span %s: parent %v, kind %v: want a root span of kind server", s.Name(), s.Parent(), s.SpanKind())
				}
				if s.Name() == mcp.ToolRunScript && s.SpanContext().TraceID() != inSpan.TraceID() {
					t.Errorf("the service ran in trace %s, the call's span is %s", inSpan.TraceID(), s.SpanContext().TraceID())
				}
				if s.Name() == "tools/call" && s.Status().Code != codes.Error {
					t.Errorf("unknown tool's span status %v, want error", s.Status())
				}
			}
			want := []string{mcp.ToolLoad, mcp.ToolRunScript, "tools/call"}
			if len(names) != len(want) || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] {
				t.Errorf("spans %v, want %v", names, want)
			}
		})
	}
}
