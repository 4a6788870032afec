package main

import (
	"path/filepath"
	"testing"

	"github.com/skillbox/skillbox/runtime/golden"
)

// TestRunJSONWire: what `skillbox run --json` prints keeps its keys, their
// omitempty and their values (testdata/results; key order aside, as for
// the run_script result it holds).
func TestRunJSONWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    runJSON
	}{
		{"run_json", golden.Filled[runJSON]()},
		{"run_json_zero", runJSON{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden.JSONAnyOrder(t, filepath.Join("testdata", "results", tc.name+".json"), tc.v)
		})
	}
}
