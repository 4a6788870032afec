package service_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/golden"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// TestRunResultWire: what the service makes of the sandbox's result, the
// skills.run_script result (key order aside) and the run.end record
// (keys in order), keeps its keys, their omitempty and their values
// (testdata/results), for a result with every field set and an empty one.
// What differs from run to run (ids, times, hashes) is set to fixed values.
func TestRunResultWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  runtime.Result
	}{
		{"run", golden.Filled[runtime.Result]()},
		{"run_zero", runtime.Result{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			f.rt.RunFunc = func(context.Context, runtime.Job) (*runtime.Result, error) { return &tc.res, nil }
			sid := f.session(t, "plain")
			res, err := f.svc.RunScript(context.Background(), owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.sh"})
			if err != nil {
				t.Fatal(err)
			}
			res.RunID = "run_1"
			golden.JSONAnyOrder(t, filepath.Join("testdata", "results", tc.name+"_script_result.json"), res)

			ends := f.audit.Events(audit.EventRunEnd)
			if len(ends) != 1 {
				t.Fatalf("%d run.end records", len(ends))
			}
			end := ends[0]
			end.Time, end.SessionID, end.PrevHash, end.Hash = golden.Time, "ses_1", "PrevHash", "Hash"
			end.Run.RunID, end.Run.Started, end.Run.Ended, end.Skill.Location = "run_1", golden.Time, golden.Time, "plain/SKILL.md"
			golden.JSON(t, filepath.Join("testdata", "results", tc.name+"_end_record.json"), end)
		})
	}
}
