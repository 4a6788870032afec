// Package golden holds a value's JSON encoding to a file in testdata, for
// tests that keep a wire format still: the file is the encoding as it was
// captured, and a change to a type that alters it fails the test instead of
// the readers of the wire. Run the tests with -update-golden to rewrite the
// files, and read the diff.
//
// It imports only the standard library, so every test in the tree, at any
// layer, can use it.
package golden

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var update = flag.Bool("update-golden", false, "rewrite the golden JSON files under testdata from the values")

// JSON checks that v encodes, indented, to exactly the bytes of file: the
// same keys, in the same order, with the same values.
func JSON(t testing.TB, file string, v any) {
	t.Helper()
	got, want := encode(t, file, v)
	if !bytes.Equal(got, want) {
		t.Errorf("encodes as\n%s\nwant (%s)\n%s", got, file, want)
	}
}

// JSONAnyOrder checks that v encodes to what file holds, key order aside:
// the same keys, with the same values (numbers compared as written), in any
// order, for objects whose readers never depend on the order of keys.
func JSONAnyOrder(t testing.TB, file string, v any) {
	t.Helper()
	got, want := encode(t, file, v)
	if !reflect.DeepEqual(decode(t, got), decode(t, want)) {
		t.Errorf("encodes as\n%s\nwant, key order aside (%s)\n%s", got, file, want)
	}
}

// encode is v's indented encoding and file's bytes, after writing the
// encoding to file when -update-golden is set.
func encode(t testing.TB, file string, v any) (got, want []byte) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatalf("encode for %s: %v", file, err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err = os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return got, want
}

func decode(t testing.TB, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}
