package audit

import (
	"path/filepath"
	"testing"

	"github.com/skillbox/skillbox/runtime/golden"
)

// TestRunInfoWire: a run's audit record keeps its keys, their order, their
// omitempty and their values (testdata/records): a filled and an empty
// RunInfo, and a run.end record with a filled run.
func TestRunInfoWire(t *testing.T) {
	end := Record{Event: EventRunEnd, Time: golden.Time, Outcome: "exit", Run: new(golden.Filled[RunInfo]()), PrevHash: "PrevHash"}
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"run_info", golden.Filled[RunInfo]()},
		{"run_info_zero", RunInfo{}},
		{"run_end_record", end},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden.JSON(t, filepath.Join("testdata", "records", tc.name+".json"), tc.v)
		})
	}
}
