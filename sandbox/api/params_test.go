package api_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

// TestRunParamsJSON: skills.run_script's and skills.run_code's params
// keep their wire names, with the shared run inputs flat beside each
// method's own, and come back from JSON as they were sent.
func TestRunParamsJSON(t *testing.T) {
	in := api.RunInputs{SessionID: "ses_1", Args: []string{"a"}, Env: map[string]string{"LANG": "C"}, Stdin: "in",
		TimeoutMS: 5, Files: []api.File{{Name: "x.txt", Content: "eA=="}}, Stream: true, ConfirmationID: "cnf_1", Background: true,
		WorkspaceParams: api.WorkspaceParams{Workspace: "/srv/w", Inputs: []string{"**"}}}
	shared := []string{"session_id", "args", "env", "stdin", "timeout_ms", "files", "stream", "confirmation_id", "background", "workspace", "inputs"}
	for _, tc := range []struct {
		name   string
		params any
		decode func([]byte) (any, error)
		own    []string
	}{
		{"skills.run_script", api.RunScriptParams{RunInputs: in, Skill: "pdf", Path: "scripts/a.py", Network: true},
			func(b []byte) (any, error) { var p api.RunScriptParams; err := json.Unmarshal(b, &p); return p, err },
			[]string{"skill", "path", "network"}},
		{"skills.run_code", api.RunCodeParams{RunInputs: in, Language: "python", Code: "print(1)"},
			func(b []byte) (any, error) { var p api.RunCodeParams; err := json.Unmarshal(b, &p); return p, err },
			[]string{"language", "code"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.params)
			if err != nil {
				t.Fatal(err)
			}
			var keys map[string]json.RawMessage
			if err := json.Unmarshal(b, &keys); err != nil {
				t.Fatal(err)
			}
			want := append(append([]string{}, shared...), tc.own...)
			for _, k := range want {
				if _, ok := keys[k]; !ok {
					t.Errorf("%s has no %q: %s", tc.name, k, b)
				}
			}
			if len(keys) != len(want) {
				t.Errorf("%s has %d keys, want %d: %s", tc.name, len(keys), len(want), b)
			}
			back, err := tc.decode(b)
			if err != nil || !reflect.DeepEqual(back, tc.params) {
				t.Errorf("round trip: %+v, %v; want %+v", back, err, tc.params)
			}
		})
	}
}
