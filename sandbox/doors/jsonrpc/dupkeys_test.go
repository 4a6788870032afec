package jsonrpc

import (
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

// TestDuplicateKeysRefused: a request holding one name twice in an object,
// at any depth, is refused: encoding/json would run the last
// value while a reader of the line may go by the first.
func TestDuplicateKeysRefused(t *testing.T) {
	ts := startServer(t, ServerOptions{}, nil)
	c := ts.dial(t)
	cases := []struct {
		name, line string
		code       int
		id         string
		wants      []string
	}{
		{"in params", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"path":"a","path":"b"}}`,
			CodeInvalidParams, "1", []string{`"path" appears twice in params`, "send each key once"}},
		{"nested", `{"jsonrpc":"2.0","id":2,"method":"echo","params":{"env":{"MODE":"a","X":"1","MODE":"b"}}}`,
			CodeInvalidParams, "2", []string{`"MODE" appears twice in params.env`}},
		{"in an array element", `{"jsonrpc":"2.0","id":3,"method":"echo","params":{"files":[{"path":"x"},{"path":"a","content":"","path":"b"}]}}`,
			CodeInvalidParams, "3", []string{`"path" appears twice in params.files[1]`}},
		{"in params given as an array", `{"jsonrpc":"2.0","id":4,"method":"echo","params":[{"a":1,"a":2}]}`,
			CodeInvalidParams, "4", []string{`"a" appears twice in params[0]`}},
		{"escaped", `{"jsonrpc":"2.0","id":5,"method":"echo","params":{"path":"a","\u0070ath":"b"}}`,
			CodeInvalidParams, "5", []string{`"path" appears twice`}},
		{"case differs", `{"jsonrpc":"2.0","id":6,"method":"echo","params":{"session_id":"a","SESSION_ID":"b"}}`,
			CodeInvalidParams, "6", []string{`"SESSION_ID" appears twice`, "ignoring case"}},
		{"kelvin sign", "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"echo\",\"params\":{\"k\":1,\"\u212a\":2}}",
			CodeInvalidParams, "7", []string{"appears twice"}},
		{"many members", `{"jsonrpc":"2.0","id":8,"method":"echo","params":{` + manyMembers(40) + `,"m03":0}}`,
			CodeInvalidParams, "8", []string{`"m03" appears twice in params`}},
		{"method twice", `{"jsonrpc":"2.0","id":9,"method":"echo","method":"peer"}`,
			CodeInvalidRequest, "9", []string{`member "method" appears twice`}},
		{"id twice", `{"jsonrpc":"2.0","id":10,"id":11,"method":"echo"}`,
			CodeInvalidRequest, "null", []string{`member "id" appears twice`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.send(tc.line)
			r := c.recv()
			wantError(t, r, tc.code, api.KindInvalidParams)
			for _, w := range tc.wants {
				if !strings.Contains(r.Error.Message, w) {
					t.Errorf("message %q does not say %q", r.Error.Message, w)
				}
			}
			if string(r.ID) != tc.id {
				t.Errorf("id %s, want %s", r.ID, tc.id)
			}
		})
	}
	// The same names in different objects, or as values, are fine; and
	// the connection is still usable after the refusals.
	for _, params := range []string{
		`{"a":{"path":"x"},"b":{"path":"y"}}`,
		`{"files":[{"path":"a"},{"path":"b"}],"path":"path"}`,
		`{"env":{"A":"\"A\":1","B":"{\"A\":2}"}}`,
		`{"` + manyMembers(0) + `":1}`,
		`{` + manyMembers(40) + `}`,
	} {
		r := c.call(20, "echo", params)
		if r.Error != nil {
			t.Errorf("params %s refused: %s", params, r.Error.Message)
		}
	}
}

func manyMembers(n int) string {
	if n == 0 {
		return "m"
	}
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"m` + string(rune('0'+i/10)) + string(rune('0'+i%10)) + `":` + "1")
	}
	return b.String()
}

// BenchmarkDecodeRequestLarge: the duplicate scan on a line near the size
// cap, with a large string value and an object of many keys.
func BenchmarkDecodeRequestLarge(b *testing.B) {
	var env strings.Builder
	for i := range 5000 {
		if i > 0 {
			env.WriteByte(',')
		}
		env.WriteString(`"K` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26)) + `":"v"`)
	}
	line := []byte(`{"jsonrpc":"2.0","id":1,"method":"skills.run_script","params":{"session_id":"ses_x","path":"a.py","env":{` +
		env.String() + `},"files":[{"path":"in.bin","content":"` + strings.Repeat("QUJD", 200_000) + `"}]}}`)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, _, e := decodeRequest(line); e != nil {
				b.Fatal(e.Message)
			}
		}
	})
	b.Run("scan only", func(b *testing.B) {
		for b.Loop() {
			if _, _, dup := api.DuplicateKey(line); dup {
				b.Fatal("duplicate")
			}
		}
	})
}
