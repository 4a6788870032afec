package jsonrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/skillbox/skillbox/sandbox/api"
)

// CallError describes one failed or refused call for
// ServerOptions.OnCallError. The byte slices are only valid during the hook.
type CallError struct {
	ConnID uint64
	Peer   api.Peer
	// ID is the request id as sent (a JSON string, number or null); nil for
	// a notification or when the line could not be read that far.
	ID json.RawMessage
	// Method is the method asked for; "" when the request could not be
	// decoded that far (for an over-long line it is taken from the line's
	// start when it is there).
	Method string
	// Params is the raw params of a decoded request (nil when absent).
	Params json.RawMessage
	// Line is the request line of a request that could not be decoded
	// (parse error, invalid request), or the start of an over-long line
	// (at most 4 KiB); LineBytes is the whole line's length, newline not
	// counted. Both are zero for decoded requests.
	Line      []byte
	LineBytes int
	// Err is the handler's error (nil for the transport's own refusals);
	// callers may look for markers in it with errors.Is/As.
	Err error
	// Resp is the error the client is told (or would be, for a
	// notification).
	Resp *Error
}

// Handler serves one method. ctx is cancelled when the call should stop (see
// context.Cause for why: ErrClientGone, ErrCallCancelled, ErrShuttingDown).
// The result is marshalled with encoding/json as the response's result; an
// error becomes the response's error through ToRPCError. Handlers run
// concurrently, also for one connection, and must honour ctx.
type Handler func(ctx context.Context, call *Call) (any, error)

// Call is one request as a handler sees it.
type Call struct {
	// ID is the request id exactly as the client sent it (a JSON string,
	// number or null); nil for a notification, which gets no response.
	ID json.RawMessage
	// Method is the method name, e.g. "skills.run_script".
	Method string
	// Params is the raw params value (an object or array), nil when absent
	// or null. Use Bind to decode it.
	Params json.RawMessage
	// Peer is the kernel-reported identity of the connecting process.
	Peer api.Peer
	// ConnID numbers connections from 1 in accept order; the audit log and
	// the daemon's log use it to tie calls to a connection.
	ConnID uint64

	conn     *conn // nil for calls made outside a connection (tests)
	notified atomic.Bool
}

// IsNotification reports whether the call expects no response.
func (c *Call) IsNotification() bool { return c.ID == nil }

// Bind decodes the params into v strictly: unknown fields are rejected (a
// misspelt "sesion_id" should be an error that names it, not a silently
// missing session), absent or null params decode as {}. Errors wrap
// api.ErrInvalidParams and say which field is wrong.
func (c *Call) Bind(v any) error {
	p := []byte(c.Params)
	if len(p) == 0 || string(p) == "null" {
		p = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid params for %s: %s: %w", c.Method, describeJSONError(err), api.ErrInvalidParams)
	}
	if dec.More() {
		return fmt.Errorf("invalid params for %s: trailing data after the params value: %w", c.Method, api.ErrInvalidParams)
	}
	return nil
}

// describeJSONError rewords encoding/json errors for a reader who sent JSON,
// not Go.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, not a JSON %s", te.Field, jsonTypeName(te.Type.String()), te.Value)
		}
		return fmt.Sprintf("params must be %s, not a JSON %s", jsonTypeName(te.Type.String()), te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func jsonTypeName(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"), strings.HasPrefix(goType, "float"):
		return "a number"
	case strings.HasPrefix(goType, "[]uint8"):
		return "a base64 string"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "an object"
	}
	return "a " + goType
}
