package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/skillbox/skillbox/sandbox/api"
)

// marshalResponse builds one response line (with its newline).
func marshalResponse(id, result json.RawMessage, e *Error) ([]byte, error) {
	if id == nil {
		id = json.RawMessage("null")
	}
	var v any
	if e != nil {
		v = struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   *Error          `json:"error"`
		}{"2.0", id, e}
	} else {
		if result == nil {
			result = json.RawMessage("null")
		}
		v = struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Result  json.RawMessage `json:"result"`
		}{"2.0", id, result}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// request is a decoded, valid request.
type request struct {
	ID     json.RawMessage // nil: notification
	Method string
	Params json.RawMessage // nil: absent or null
}

// decodeRequest parses one line. On failure it returns the error to send and
// the id to send it with (nil → null: the id could not be determined), and a
// request holding the method when the line named one (for the audit).
// Member names match exactly (encoding/json alone would also accept "ID" or
// "Method"); members other than jsonrpc, id, method and params are ignored.
func decodeRequest(line []byte) (request, json.RawMessage, *Error) {
	line = trimJSONSpace(line)
	var partial request // what is known of a refused request
	invalid := func(id json.RawMessage, format string, args ...any) (request, json.RawMessage, *Error) {
		return partial, id, &Error{Code: CodeInvalidRequest, Kind: api.KindInvalidParams, Message: "invalid request: " + fmt.Sprintf(format, args...)}
	}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		msg := "the line is not valid JSON"
		if err != nil {
			msg += ": " + describeJSONError(err)
		}
		return request{}, nil, &Error{Code: CodeParseError, Kind: api.KindInvalidParams,
			Message: "parse error: " + msg + "; send one JSON-RPC request object per line"}
	}
	if len(line) > 0 && line[0] == '[' {
		return invalid(nil, "batch requests (arrays) are not supported; send one request object per line")
	}
	if len(line) == 0 || line[0] != '{' {
		return invalid(nil, "a request must be a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil || m == nil {
		return invalid(nil, "a request must be a JSON object")
	}
	if where, name, dup := api.DuplicateKey(line); dup {
		if raw, ok := m["method"]; ok && len(raw) > 0 && raw[0] == '"' {
			json.Unmarshal(raw, &partial.Method)
		}
		// Echo the id only when it was not itself repeated.
		var id json.RawMessage
		if raw, ok := m["id"]; ok && validID(raw) && (where != "" || !strings.EqualFold(name, "id")) {
			id = raw
		}
		if where == "" {
			return invalid(id, "member %q appears twice (names are compared ignoring case); send each member once", name)
		}
		return partial, id, &Error{Code: CodeInvalidParams, Kind: api.KindInvalidParams,
			Message: fmt.Sprintf("invalid params: key %q appears twice in %s (keys are compared ignoring case, as fields are matched); send each key once", name, where)}
	}
	if raw, ok := m["method"]; ok && len(raw) > 0 && raw[0] == '"' {
		json.Unmarshal(raw, &partial.Method)
	}
	var id json.RawMessage
	if raw, ok := m["id"]; ok {
		if !validID(raw) {
			return invalid(nil, "id must be a string (valid UTF-8), a number or null")
		}
		id = raw
	}
	var version string
	if raw, ok := m["jsonrpc"]; !ok || json.Unmarshal(raw, &version) != nil || version != "2.0" {
		return invalid(id, `"jsonrpc" must be "2.0"`)
	}
	var method string
	raw, ok := m["method"]
	if !ok {
		return invalid(id, `"method" is missing`)
	}
	if raw[0] != '"' || json.Unmarshal(raw, &method) != nil {
		return invalid(id, `"method" must be a string`)
	}
	if method == "" {
		return invalid(id, `"method" is empty`)
	}
	var params json.RawMessage
	if raw, ok := m["params"]; ok && string(raw) != "null" {
		if raw[0] != '{' && raw[0] != '[' {
			return invalid(id, `"params" must be an object`)
		}
		params = raw
	}
	return request{ID: id, Method: method, Params: params}, id, nil
}

// validID reports whether raw (valid JSON) is a string, number or null.
func validID(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	switch b := raw[0]; {
	case b == '"':
		// Echoed back as sent: it must be valid UTF-8 without raw
		// control characters (json.Valid lets invalid UTF-8 through).
		return utf8.Valid(raw)
	case b == '-', b >= '0' && b <= '9':
		return true
	case b == 'n':
		return string(raw) == "null"
	}
	return false
}

// peekID finds a top-level "id" in the start of a (possibly cut off) request
// object; nil when there is none before the cut.
func peekID(prefix []byte) json.RawMessage {
	if v := peekMember(prefix, "id"); validID(v) {
		return v
	}
	return nil
}

// peekMethod finds a top-level string "method" in the start of a (possibly
// cut off) request object; "" when there is none before the cut.
func peekMethod(prefix []byte) string {
	var m string
	if v := peekMember(prefix, "method"); len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &m) == nil {
		return m
	}
	return ""
}

// peekMember returns the value of the first top-level member named key in
// the start of a (possibly cut off) JSON object; nil when it is not there
// before the cut.
func peekMember(prefix []byte, key string) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if k, _ := tok.(string); k == key {
			return v
		}
	}
	return nil
}

func trimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\r\n")
}
