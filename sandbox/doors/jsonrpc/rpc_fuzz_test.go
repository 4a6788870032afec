package jsonrpc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

// FuzzDecodeRequest feeds arbitrary lines to the request decoder, the first
// thing every byte from a client reaches. It must never panic, must accept
// only well-formed requests, and must always produce a response line that is
// itself valid JSON-RPC. A line holding one member name twice in an object
// (bytes.EqualFold, as encoding/json matches names) is never accepted, and
// is refused only for that reason when it is otherwise a request (the scan
// itself is checked against a decoder-based reference by
// api.FuzzDuplicateKey). The seed corpus is in
// testdata/fuzz/FuzzDecodeRequest.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"skills.load","params":{"session_id":"ses_x","names":["pdf"]}}`,
		`{"jsonrpc":"2.0","method":"rpc.cancel","params":{"id":1}}`,
		`{"jsonrpc":"2.0","id":"a","method":"x","params":[1,2]}`,
		`{"jsonrpc":"2.0","id":null,"method":"x","params":null}`,
		`[{"jsonrpc":"2.0","id":1,"method":"x"}]`,
		`{"jsonrpc":"2.0","id":{},"method":"x"}`,
		`{"jsonrpc":"2.0","id":1,"method":1}`,
		`{"jsonrpc":"2\u002e0","id":-1.5e3,"method":"\u0078"}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":"s"}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}",
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"b":1,"B":2}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":[{"a":1},{"a":2,"\u0061":3}]}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{"k":1,"\u212a":2,"s":[{}]}}`,
		`null`, `{}`, `{`, ``, "\x00", `"str"`, `123`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, id, rerr := decodeRequest(line)
		_, _, dup := api.DuplicateKey(line)
		dup = dup && json.Valid(line)
		if rerr != nil {
			if rerr.Code != CodeParseError && rerr.Code != CodeInvalidRequest && rerr.Code != CodeInvalidParams {
				t.Fatalf("decoder error code %d", rerr.Code)
			}
			if strings.Contains(rerr.Message, "appears twice") != dup && len(bytes.TrimSpace(line)) > 0 && bytes.TrimSpace(line)[0] == '{' {
				t.Fatalf("duplicate %v, but refused with %q", dup, rerr.Message)
			}
			if id != nil && !validID(id) {
				t.Fatalf("error id %q is not a valid id", id)
			}
			checkResponse(t, id, nil, rerr)
		} else {
			if req.Method == "" {
				t.Fatal("accepted a request without a method")
			}
			if dup {
				t.Fatalf("accepted a duplicate member: %q", line)
			}
			if req.ID != nil && (!json.Valid(req.ID) || !validID(req.ID)) {
				t.Fatalf("accepted id %q", req.ID)
			}
			if req.Params != nil && (!json.Valid(req.Params) || (req.Params[0] != '{' && req.Params[0] != '[')) {
				t.Fatalf("accepted params %q", req.Params)
			}
			if !json.Valid(line) {
				t.Fatalf("accepted invalid JSON %q", line)
			}
			checkResponse(t, req.ID, json.RawMessage(`{"ok":true}`), nil)
			call := &Call{Method: req.Method, Params: req.Params}
			var v map[string]any
			_ = call.Bind(&v) // must not panic
		}
		_ = peekID(line) // the over-long-line path sees arbitrary prefixes
	})
}

func checkResponse(t *testing.T, id, result json.RawMessage, e *Error) {
	t.Helper()
	b, err := marshalResponse(id, result, e)
	if err != nil {
		t.Fatalf("marshalResponse: %v", err)
	}
	if !bytes.HasSuffix(b, []byte("\n")) || bytes.Count(b, []byte("\n")) != 1 {
		t.Fatalf("response is not one line: %q", b)
	}
	var r map[string]json.RawMessage
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("response is not JSON: %q", b)
	}
	if string(r["jsonrpc"]) != `"2.0"` || r["id"] == nil {
		t.Fatalf("response lacks jsonrpc or id: %q", b)
	}
}
