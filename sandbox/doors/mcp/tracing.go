package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/runtime/span"
)

// tracedMethods are the MCP methods that get a root span: those that reach
// the service. A tool call's span is named by the tool when it is one of
// skillbox's (a bounded set), else by the method.
var tracedMethods = map[string]bool{"tools/call": true, "prompts/get": true, "resources/read": true}

// traceMiddleware starts one root span per traced call with the tracer of
// Options.Tracer; the service's work runs in its context.
func (c *Conn) traceMiddleware(next sdk.MethodHandler) sdk.MethodHandler {
	tracer := c.s.opts.Tracer
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if !tracedMethods[method] {
			return next(ctx, method, req)
		}
		name := method
		if r, ok := req.(*sdk.CallToolRequest); ok && r.Params != nil && c.knownTool(r.Params.Name) {
			name = r.Params.Name
		}
		ctx, sp := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("rpc.system", "mcp"), attribute.String("rpc.method", method)))
		res, err := next(ctx, method, req)
		kind := ""
		if r, ok := res.(*sdk.CallToolResult); ok && r != nil && r.IsError && err == nil {
			err, kind = errToolResult, "tool_error"
		}
		span.End(sp, err, kind)
		if err == errToolResult {
			err = nil
		}
		return res, err
	}
}

// errToolResult marks a span whose tool answered with an error result.
var errToolResult = toolResultError{}

type toolResultError struct{}

func (toolResultError) Error() string { return "the tool returned an error result" }

// knownTool says whether name is one of the tools this server adds.
func (c *Conn) knownTool(name string) bool {
	switch name {
	case ToolList, ToolLoad, ToolUnload, ToolRead, ToolRunScript, ToolRunCode, ToolCheck,
		ToolRunsList, ToolRunsLogs, ToolRunsWait, ToolRunsSignal:
		return true
	}
	return false
}
