package mcp

import (
	"path/filepath"
	"testing"

	"github.com/skillbox/skillbox/runtime/golden"
	"github.com/skillbox/skillbox/sandbox/api"
)

// TestRunOutputWire: the result of skills_run_script as the door builds it
// from the service's result, its content and its structured output, keeps
// its keys, their order, their omitempty and their values
// (testdata/results), for a run with every field set and an empty one.
func TestRunOutputWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  api.RunScriptResult
	}{
		{"run_output", golden.Filled[api.RunScriptResult]()},
		{"run_output_zero", api.RunScriptResult{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Conn{s: &Server{opts: Options{}}, runs: newRunStore(maxStoredRuns, maxStoredBytes)}
			tr, out := c.runResult(&tc.res)
			golden.JSON(t, filepath.Join("testdata", "results", tc.name+".json"), out)
			golden.JSON(t, filepath.Join("testdata", "results", tc.name+"_content.json"), tr)
		})
	}
}
