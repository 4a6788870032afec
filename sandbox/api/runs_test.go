package api

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/golden"
)

// TestRunsWire: the params and results of runs.list, runs.logs, runs.wait,
// runs.signal, sessions.pause, sessions.resume and sessions.fork keep
// their wire names (testdata/runs/<name>.json, checked against the doc
// comments; -update-golden rewrites them, so read the diff), and the golden
// text decodes back, with no field unknown, to what was encoded.
func TestRunsWire(t *testing.T) {
	started := time.Date(2026, 11, 26, 9, 30, 0, 123000000, time.UTC)
	code := 143
	zero := 0
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"runs_list_params", &RunsListParams{SessionID: "ses_1"}},
		{"runs_list_result", &RunsListResult{Runs: []BackgroundRun{
			{RunID: "run_1", SessionID: "ses_1", Skill: "web", Path: "scripts/serve.py", State: RunRunning, PID: 7,
				Started: started, SessionSandbox: "skillbox-s1", Log: "/work/.skillbox/runs/run_1.log"},
			{RunID: "run_2", SessionID: "ses_1", State: RunExited, Started: started, SessionSandbox: "skillbox-s1",
				Log: "/work/.skillbox/runs/run_2.log", ExitCode: &code, Signal: "SIGTERM"},
			{RunID: "run_3", SessionID: "ses_1", State: RunExited, Started: started, SessionSandbox: "skillbox-s1",
				Log: "/work/.skillbox/runs/run_3.log", ExitCode: &zero},
		}}},
		{"runs_list_result_empty", &RunsListResult{Runs: []BackgroundRun{}}},
		{"run_logs_params", &RunLogsParams{SessionID: "ses_1", RunID: "run_1", Offset: 10, Length: 4096}},
		{"run_logs_params_defaults", &RunLogsParams{SessionID: "ses_1", RunID: "run_1"}},
		{"run_logs_result", &RunLogsResult{RunID: "run_1", Offset: 10, NextOffset: 14, Size: 14, Encoding: "utf-8",
			Data: "done", State: RunExited, EOF: true}},
		{"run_wait_params", &RunWaitParams{SessionID: "ses_1", RunID: "run_1", TimeoutMS: 5000}},
		{"run_signal_params", &RunSignalParams{SessionID: "ses_1", RunID: "run_1", Signal: "KILL"}},
		{"run_signal_params_default", &RunSignalParams{SessionID: "ses_1", RunID: "run_1"}},
		{"pause_session_params", &SessionParams{SessionID: "ses_1"}},
		{"pause_session_result", &PauseSessionResult{SessionID: "ses_1", Sandboxes: []PausedSandbox{
			{Sandbox: "skillbox-s1", Checkpoint: "ck-0123456789abcdef01234567", Digest: "sha256:ab", Bytes: 1 << 20, DurationMS: 250},
		}}},
		{"resume_session_params", &ResumeSessionParams{SessionID: "ses_1", Fresh: true}},
		{"resume_session_result", &ResumeSessionResult{SessionID: "ses_1", Sandboxes: []string{"skillbox-s1"}, Fresh: false}},
		{"fork_session_result", &ForkSessionResult{SessionID: "ses_2", From: "ses_1", Sandboxes: []string{"skillbox-s2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join("testdata", "runs", tc.name+".json")
			golden.JSON(t, file, tc.v)
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			// The golden text decodes to the same value.
			back := reflect.New(reflect.TypeOf(tc.v).Elem())
			dec := json.NewDecoder(bytes.NewReader(want))
			dec.DisallowUnknownFields()
			if err := dec.Decode(back.Interface()); err != nil {
				t.Fatalf("decode %s: %v", file, err)
			}
			if !reflect.DeepEqual(back.Interface(), tc.v) {
				t.Errorf("round trip of %s: %+v, want %+v", tc.name, back.Elem().Interface(), reflect.ValueOf(tc.v).Elem().Interface())
			}
		})
	}
}

// TestRunsMethodNames: the method names are the documented ones.
func TestRunsMethodNames(t *testing.T) {
	for got, want := range map[string]string{
		MethodRunsList: "runs.list", MethodRunsLogs: "runs.logs", MethodRunsWait: "runs.wait", MethodRunsSignal: "runs.signal",
		MethodSessionsPause: "sessions.pause", MethodSessionsResume: "sessions.resume", MethodSessionsFork: "sessions.fork",
		RunRunning: "running", RunExited: "exited",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}
