package api

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/skillbox/skillbox/runtime/golden"
)

// TestRunScriptResultWire: skills.run_script's result keeps its keys, their
// omitempty and their values, whatever the Go type's layout
// (testdata/results; readers never depend on key order), and the golden
// text decodes back, with no field unknown, to what was encoded.
func TestRunScriptResultWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    RunScriptResult
	}{
		{"run_script_result", golden.Filled[RunScriptResult]()},
		{"run_script_result_zero", RunScriptResult{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join("testdata", "results", tc.name+".json")
			golden.JSONAnyOrder(t, file, tc.v)
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var back RunScriptResult
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&back); err != nil {
				t.Fatalf("decode %s: %v", file, err)
			}
			if !reflect.DeepEqual(back, tc.v) {
				t.Errorf("round trip of %s: %+v, want %+v", tc.name, back, tc.v)
			}
		})
	}
}
