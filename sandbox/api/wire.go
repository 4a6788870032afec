package api

import (
	"encoding/json"
)

// Error is an error as it crosses the wire, the one type both ends use: the
// JSON-RPC server (sandbox/doors/jsonrpc) encodes a handler's error as one, and
// the Go client (sandbox/client) decodes the daemon's answer into one. On
// the wire it is the JSON-RPC error object
//
//	{"code": -32001, "message": "...", "data": {"kind": "not_found", ...Data}}
//
// Kind (data.kind) is always present on the wire; Detail (data.detail) when
// the message starts with the kind's words; Data holds the other data
// fields a host can act on (confirmation_id, limit, methods, ...). Code is
// JSON-RPC's, which sandbox/doors/jsonrpc derives from the kind.
//
// It unwraps to its kind's sentinel and reports Data through ErrorData, so
// errors.Is(err, ErrDenied), KindOf and ErrorData work across the socket as
// they do in process.
type Error struct {
	Code    int
	Message string
	Kind    string
	// Detail (data.detail) is the message without its kind's words ("the
	// user declined the run" for "denied: the user declined the run"), for
	// a front end that shows the kind its own way. Empty when the message
	// has no such words.
	Detail string
	Data   map[string]any
}

func (e *Error) Error() string {
	if e.Kind == "" {
		return e.Message
	}
	return e.Kind + ": " + e.Message
}

// Unwrap returns the sentinel of the error's kind (nil without a kind).
func (e *Error) Unwrap() error {
	if e.Kind == "" {
		return nil
	}
	return Sentinel(e.Kind)
}

// ErrorData returns the data fields besides kind, for ErrorData.
func (e *Error) ErrorData() map[string]any { return e.Data }

// MarshalJSON writes the JSON-RPC error object with kind folded into data
// (internal when unset).
func (e *Error) MarshalJSON() ([]byte, error) {
	data := make(map[string]any, len(e.Data)+1)
	for k, v := range e.Data {
		data[k] = v
	}
	kind := e.Kind
	if kind == "" {
		kind = KindInternal
	}
	data["kind"] = kind
	if e.Detail != "" && e.Detail != e.Message {
		data["detail"] = e.Detail
	}
	return json.Marshal(struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	}{e.Code, e.Message, data})
}

// UnmarshalJSON reads a JSON-RPC error object, lifting data.kind into Kind
// and data.detail into Detail.
// Data that is not an object is kept whole under the key "data".
func (e *Error) UnmarshalJSON(b []byte) error {
	var w struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	e.Code, e.Message, e.Kind, e.Detail, e.Data = w.Code, w.Message, "", "", nil
	var data map[string]any
	if len(w.Data) > 0 && json.Unmarshal(w.Data, &data) == nil {
		if k, ok := data["kind"].(string); ok {
			e.Kind = k
		}
		if d, ok := data["detail"].(string); ok {
			e.Detail = d
		}
		delete(data, "kind")
		delete(data, "detail")
		if len(data) > 0 {
			e.Data = data
		}
	} else if len(w.Data) > 0 && string(w.Data) != "null" {
		e.Data = map[string]any{"data": json.RawMessage(w.Data)}
	}
	return nil
}

// ConfirmationRequired returns the confirmation to get approved when the
// error is a run (or hook) held for approval.
func (e *Error) ConfirmationRequired() (*ConfirmationRequiredData, bool) {
	if e.Kind != KindConfirmationRequired {
		return nil, false
	}
	b, err := json.Marshal(e.Data)
	if err != nil {
		return nil, false
	}
	var d ConfirmationRequiredData
	if json.Unmarshal(b, &d) != nil || d.ConfirmationID == "" {
		return nil, false
	}
	return &d, true
}
