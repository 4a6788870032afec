package api

import "context"

// Events a call emits while it runs. Over JSON-RPC each is a notification
// whose method is EventMethod() and whose params are the event; over MCP
// they become progress notifications. A call emits them only when it was
// asked to (RunScriptParams.Stream) and the caller gave an EventSink.
const (
	EventRunStarted       = "run.started"
	EventRunOutput        = "run.output"
	EventRunOutputDropped = "run.output_dropped"
	EventRunExited        = "run.exited"
)

// Output streams of RunOutputEvent.Stream.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Event is one event of a call.
type Event interface {
	EventMethod() string
}

// RunStartedEvent: the sandbox of run RunID is about to start. Emitted
// after every check passed (policy, confirmation, audit), so a run that is
// refused emits nothing.
type RunStartedEvent struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id,omitempty"`
	Skill     string `json:"skill"`
	Path      string `json:"path"`
	Image     string `json:"image,omitempty"`
	Runtime   string `json:"runtime,omitempty"`
}

// RunOutputEvent is a chunk of a run's output, as the script wrote it (after
// the output caps). Seq counts a run's output events from 1, over both
// streams, so a receiver can tell order and gaps.
type RunOutputEvent struct {
	RunID  string `json:"run_id"`
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	Data   string `json:"data"`
}

// RunOutputDroppedEvent says that a receiver was too slow: Events output
// events (Bytes bytes) of run RunID were not delivered to it. The run was
// not slowed down, and its result still carries the whole (capped) output.
type RunOutputDroppedEvent struct {
	RunID  string `json:"run_id"`
	Events uint64 `json:"events"`
	Bytes  int64  `json:"bytes"`
}

// RunExitedEvent: run RunID has ended; the call's result follows.
type RunExitedEvent struct {
	RunID      string `json:"run_id"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	Reason     string `json:"reason"` // outcome.Reason's values, as RunScriptResult.Reason
	DurationMS int64  `json:"duration_ms"`
	// Error is why a run that did not finish (Reason "error") ended.
	Error string `json:"error,omitempty"`
}

func (RunStartedEvent) EventMethod() string       { return EventRunStarted }
func (RunOutputEvent) EventMethod() string        { return EventRunOutput }
func (RunOutputDroppedEvent) EventMethod() string { return EventRunOutputDropped }
func (RunExitedEvent) EventMethod() string        { return EventRunExited }

// EventSink receives a call's events, in order, from the goroutines that
// produce them. It must not block: a front end that cannot deliver at once
// buffers (bounded) or drops, and says so with RunOutputDroppedEvent.
type EventSink func(Event)

type eventSinkKey struct{}

// WithEventSink returns ctx carrying sink for the call made with it.
func WithEventSink(ctx context.Context, sink EventSink) context.Context {
	return context.WithValue(ctx, eventSinkKey{}, sink)
}

// EventSinkFrom returns the sink ctx carries, or nil.
func EventSinkFrom(ctx context.Context) EventSink {
	s, _ := ctx.Value(eventSinkKey{}).(EventSink)
	return s
}

type requestIDKey struct{}

// WithRequestID returns ctx carrying the front end's id of the request
// (the JSON-RPC id as sent), which the service writes into audit records.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestIDFrom returns the request id ctx carries, or "".
func RequestIDFrom(ctx context.Context) string {
	s, _ := ctx.Value(requestIDKey{}).(string)
	return s
}
