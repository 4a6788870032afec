package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/runtime/span"
	"github.com/skillbox/skillbox/sandbox/api"
)

// dispatch decodes one line and starts its call; it runs on the reader
// goroutine, so decoding is synchronous and c.buf may be reused afterwards.
func (c *conn) dispatch(line []byte) {
	line = trimJSONSpace(line)
	if len(line) == 0 {
		return // blank lines are allowed as keep-alives
	}
	req, errID, rerr := decodeRequest(line)
	if rerr != nil {
		c.log.Debug("bad request", "error", rerr.Message)
		c.callError(&CallError{ID: errID, Method: req.Method, Line: line, LineBytes: len(line), Resp: rerr})
		c.writeError(errID, rerr)
		return
	}
	if req.Method == MethodCancel {
		c.cancelCall(req)
		return
	}
	refuse := func(e *Error) {
		c.callError(&CallError{ID: req.ID, Method: req.Method, Params: req.Params, Resp: e})
		if req.ID != nil {
			c.writeError(req.ID, e)
		}
	}
	h := c.s.Handler(req.Method)
	if h == nil {
		refuse(methodNotFound(req.Method, c.s.Methods()))
		return
	}
	key := string(req.ID)
	if req.ID != nil {
		c.imu.Lock()
		_, dup := c.inflight[key]
		c.imu.Unlock()
		if dup {
			refuse(&Error{Code: CodeInvalidRequest, Kind: api.KindInvalidParams,
				Message: fmt.Sprintf("id %s is already used by a call in flight on this connection; use a new id per request", key)})
			return
		}
	}
	// The call keeps the line's bytes accounted until it ends.
	size, held := int64(len(line)), c.held
	c.held = 0
	release := func() { c.s.releaseBytes(c.peer.UID, held) }
	// Backpressure: wait for a free call slot rather than failing the call.
	select {
	case c.sem <- struct{}{}:
	case <-c.ctx.Done():
		release()
		return
	}
	s := c.s
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-c.sem
		release()
		refuse(ToRPCError(ErrShuttingDown))
		return
	}
	s.calls.Add(1)
	s.mu.Unlock()

	ctx, cancel := context.WithCancelCause(c.ctx)
	if req.ID != nil {
		c.imu.Lock()
		c.inflight[key] = cancel
		c.imu.Unlock()
	}
	c.active.Add(1)
	c.calls.Add(1)
	call := &Call{ID: req.ID, Method: req.Method, Params: req.Params, Peer: c.peer, ConnID: c.id, conn: c}
	go func() {
		c.run(ctx, cancel, h, call)
		release()
		if size >= bigRequest {
			c.s.returnMemory()
		}
	}()
}

// run executes one call and writes its response.
func (c *conn) run(ctx context.Context, cancel context.CancelCauseFunc, h Handler, call *Call) {
	defer c.s.calls.Done()
	defer c.calls.Done()
	start := time.Now()
	var sp trace.Span
	if t := c.s.opts.Tracer; t != nil {
		ctx, sp = t.Start(ctx, call.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("rpc.system", "jsonrpc"), attribute.String("rpc.method", call.Method)))
	}
	result, err := c.invoke(ctx, h, call)

	// Free the id and the slot before answering, so a client may reuse the
	// id as soon as it has read the response.
	if call.ID != nil {
		c.imu.Lock()
		delete(c.inflight, string(call.ID))
		c.imu.Unlock()
	}
	cancel(nil)
	c.active.Add(-1)
	<-c.sem

	var rerr *Error
	herr := err // as the handler returned it, for OnCallError
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Say why the call stopped, not just "context canceled".
			err = fmt.Errorf("%s stopped: %w", call.Method, context.Cause(ctx))
		}
		rerr = ToRPCError(err)
		lvl := hclog.Debug
		if rerr.Kind == api.KindInternal {
			lvl = hclog.Error
		}
		c.log.Log(lvl, "call failed", "method", call.Method, "kind", rerr.Kind, "error", err, "duration", time.Since(start))
	} else {
		c.log.Trace("call done", "method", call.Method, "duration", time.Since(start))
	}
	var raw json.RawMessage
	if rerr == nil && call.ID != nil {
		raw, err = json.Marshal(result)
		if err != nil {
			c.log.Error("cannot marshal result", "method", call.Method, "error", err)
			herr = err
			rerr = &Error{Code: CodeInternal, Kind: api.KindInternal,
				Message: fmt.Sprintf("internal error: the result of %s could not be encoded", call.Method)}
		}
	}
	if rerr != nil {
		c.callError(&CallError{ID: call.ID, Method: call.Method, Params: call.Params, Err: herr, Resp: rerr})
	}
	if sp != nil {
		var kind string
		if rerr != nil {
			kind = rerr.Kind
		}
		span.End(sp, herr, kind)
	}
	if call.notified.Load() {
		// Its notifications go out before the response.
		done := make(chan struct{})
		if c.enqueue(context.Background(), note{done: done}) == nil {
			select {
			case <-done:
			case <-c.ctx.Done():
			}
		}
	}
	if call.ID == nil {
		return
	}
	c.write(call.ID, raw, rerr)
}

// callError tells OnCallError about a refused or failed call.
func (c *conn) callError(ce *CallError) {
	f := c.s.opts.OnCallError
	if f == nil {
		return
	}
	ce.ConnID, ce.Peer = c.id, c.peer
	c.hook("OnCallError", func() { f(ce) })
}

// hook runs a ServerOptions hook, turning a panic into a log line: a bug in
// a hook must not take the daemon down.
func (c *conn) hook(name string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("hook panicked", "hook", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	f()
}

// invoke calls h, turning a panic into an internal error.
func (c *conn) invoke(ctx context.Context, h Handler, call *Call) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("handler panicked", "method", call.Method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			result = nil
			err = &Error{Code: CodeInternal, Kind: api.KindInternal,
				Message: fmt.Sprintf("internal error in %s; the daemon logged the details", call.Method)}
		}
	}()
	return h(ctx, call)
}

// cancelCall serves rpc.cancel.
func (c *conn) cancelCall(req request) {
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	found := false
	if err := json.Unmarshal(req.Params, &p); err == nil && len(p.ID) > 0 {
		c.imu.Lock()
		cancel, ok := c.inflight[string(p.ID)]
		c.imu.Unlock()
		if ok {
			cancel(ErrCallCancelled)
			found = true
		}
	}
	if req.ID != nil {
		c.write(req.ID, json.RawMessage(fmt.Sprintf(`{"cancelled":%t}`, found)), nil)
	}
}

// methodNotFound builds the -32601 error, naming the closest methods so a
// model that misspelt one can correct itself.
func methodNotFound(method string, known []string) *Error {
	type cand struct {
		name string
		d    int
	}
	var close []cand
	for _, k := range known {
		d := editDistance(strings.ToLower(method), strings.ToLower(k))
		if d <= max(2, len(k)/3) || strings.HasSuffix(k, "."+method) {
			close = append(close, cand{k, d})
		}
	}
	sort.SliceStable(close, func(i, j int) bool { return close[i].d < close[j].d })
	if len(close) > 3 {
		close = close[:3]
	}
	names := make([]string, len(close))
	for i, c := range close {
		names[i] = c.name
	}
	e := &Error{Code: CodeMethodNotFound, Kind: api.KindNotFound}
	switch {
	case len(names) > 0:
		e.Message = fmt.Sprintf("unknown method %q; did you mean %s?", method, quoteJoin(names))
		e.Data = map[string]any{"methods": names}
	case len(known) > 0:
		e.Message = fmt.Sprintf("unknown method %q; the methods are %s", method, quoteJoin(known))
		e.Data = map[string]any{"methods": known}
	default:
		e.Message = fmt.Sprintf("unknown method %q; this server has no methods", method)
	}
	return e
}

func quoteJoin(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// editDistance is the Levenshtein distance over bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
