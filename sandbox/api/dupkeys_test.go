package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestDuplicateKey: the scan both front ends run on every message finds a
// name given twice in one object, at any depth, compared as encoding/json
// matches fields (unescaped, ignoring case), and says where it is.
func TestDuplicateKey(t *testing.T) {
	cases := []struct {
		name, data string
		where, key string
		wantDup    bool
	}{
		{"top level", `{"id":1,"id":2}`, "", "id", true},
		{"in params", `{"params":{"path":"a","path":"b"}}`, "params", "path", true},
		{"nested", `{"params":{"arguments":{"env":{"A":"1","B":"2","A":"3"}}}}`, "params.arguments.env", "A", true},
		{"in an array element", `{"files":[{"path":"x"},{"path":"a","content":"","path":"b"}]}`, "files[1]", "path", true},
		{"top-level array", `[{"a":1},{"a":1,"a":2}]`, "[1]", "a", true},
		{"escaped", `{"path":"a","\u0070ath":"b"}`, "", "path", true},
		{"case differs", `{"session_id":"a","SESSION_ID":"b"}`, "", "SESSION_ID", true},
		{"kelvin sign", "{\"k\":1,\"\u212a\":2}", "", "\u212a", true},
		{"many members", `{` + members(40) + `,"m03":0}`, "", "m03", true},
		{"same name in sibling objects", `{"a":{"path":"x"},"b":{"path":"y"}}`, "", "", false},
		{"name as a value", `{"files":[{"path":"a"},{"path":"b"}],"path":"path"}`, "", "", false},
		{"quoted names inside strings", `{"env":{"A":"\"A\":1","B":"{\"A\":2}"}}`, "", "", false},
		{"many distinct members", `{` + members(40) + `}`, "", "", false},
		{"scalar", `"x"`, "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			where, key, dup := DuplicateKey([]byte(tc.data))
			if dup != tc.wantDup || where != tc.where || key != tc.key {
				t.Errorf("DuplicateKey(%s) = %q, %q, %v; want %q, %q, %v", tc.data, where, key, dup, tc.where, tc.key, tc.wantDup)
			}
		})
	}
}

func members(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"m` + string(rune('0'+i/10)) + string(rune('0'+i%10)) + `":1`)
	}
	return b.String()
}

// FuzzDuplicateKey checks the scan against a reference built on
// encoding/json's tokenizer for valid JSON, and that it never panics on
// anything else. The front ends' own fuzz targets (FuzzDecodeRequest in
// sandbox/doors/jsonrpc) check that they refuse exactly what it finds.
func FuzzDuplicateKey(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"skills.load","params":{"session_id":"ses_x","names":["pdf"]}}`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"b":1,"B":2}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":[{"a":1},{"a":2,"\u0061":3}]}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{"k":1,"\u212a":2,"s":[{}]}}`,
		`{"a":"\\","a\\"":1,"b":"\"}"}`,
		`{"` + strings.Repeat("x", 40) + `":{` + members(20) + `,"M19":1}}`,
		`]`, `}}`, `{"a`, `"\`, `null`, `{}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		where, name, dup := DuplicateKey(data) // must not panic, valid or not
		if !json.Valid(data) {
			return
		}
		if ref := refDuplicate(t, data); dup != ref {
			t.Fatalf("DuplicateKey = %v (%q in %q), reference %v, on %q", dup, name, where, ref, data)
		}
	})
}

// refDuplicate is the fuzz target's reference: whether some object in data
// (valid JSON) holds two member names that bytes.EqualFold calls equal,
// found with encoding/json's tokenizer instead of DuplicateKey's scan.
func refDuplicate(t *testing.T, data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var value func() bool
	value = func() bool {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("reference decoder: %v on valid JSON %q", err, data)
		}
		switch tok {
		case json.Delim('{'):
			var names []string
			dup := false
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					t.Fatalf("reference decoder: %v", err)
				}
				for _, n := range names {
					if bytes.EqualFold([]byte(n), []byte(k.(string))) {
						dup = true
					}
				}
				names = append(names, k.(string))
				dup = value() || dup
			}
			dec.Token()
			return dup
		case json.Delim('['):
			dup := false
			for dec.More() {
				dup = value() || dup
			}
			dec.Token()
			return dup
		}
		return false
	}
	return value()
}

func BenchmarkDuplicateKeyScan(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","id":1,"method":"skills.run_script","params":{"session_id":"ses_x","path":"a.py","files":[{"path":"in.bin","content":"` + strings.Repeat("QUJD", 200_000) + `"}]}}`)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, dup := DuplicateKey(line); dup {
			b.Fatal("duplicate")
		}
	}
}
