package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func runPolicy(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	app := newApp()
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errw
	err := app.Run(append([]string{"skillbox", "policy", "check"}, args...))
	code := 0
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) {
			t.Fatalf("unexpected error %v", err)
		}
		code = ee.code
		errw.WriteString(ee.msg)
	}
	return out.String(), errw.String(), code
}

func TestPolicyCheckCommand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		out     []string
		errText []string
	}{
		{"example", []string{"../../examples/skillbox.hcl"}, 0,
			[]string{"valid (sha256:", `policy "needs-approval" (../../examples/skillbox.hcl:`, "socket ", "python", ".py → python3", "timeout 30s"}, nil},
		{"decision after FILE", []string{"../../examples/skillbox.hcl", "--skill", "guarded-pdf", "--tool", "skills.run_script"}, 0,
			[]string{"decision", "confirm", `policy "needs-approval"`}, nil},
		{"decision before FILE", []string{"--skill", "pdf", "--tool", "Bash", "--input", `{"command": "ls"}`, "../../examples/skillbox.hcl"}, 0,
			[]string{"deny", "default deny"}, nil},
		{"invalid", []string{"../../policy/testdata/invalid/many.hcl"}, 1, nil,
			[]string{"many.hcl:6: daemon.max_active_skills", "many.hcl:9: limits.memory", "3 problem(s)"}},
		{"no file", nil, 2, nil, []string{"missing FILE"}},
		{"tool without skill", []string{"../../examples/skillbox.hcl", "--tool", "Read"}, 2, nil, []string{"--tool needs --skill"}},
		{"missing file", []string{"/nonexistent/skillbox.hcl"}, 1, nil, []string{"no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errText, code := runPolicy(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errText)
			}
			for _, w := range tc.out {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.errText {
				if !strings.Contains(errText, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errText)
				}
			}
		})
	}
}

func TestPolicyCheckJSON(t *testing.T) {
	out, _, code := runPolicy(t, "../../examples/skillbox.hcl", "--skill", "x", "--tool", "Bash",
		"--input", `{"command": "git status"}`, "--allowed-tools", "Bash(git:*) Read", "--json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var d struct{ Decision, Rule, Reason string }
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if d.Decision != "deny" || d.Rule != "default deny" {
		t.Errorf("%+v", d)
	}
}
