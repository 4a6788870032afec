package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runSkills runs the CLI in-process and returns stdout, stderr and the exit
// code main would use.
func runSkills(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	app := newApp()
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errw
	err := app.Run(append([]string{"skillbox"}, args...))
	code := 0
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) {
			t.Fatalf("unexpected error %v", err)
		}
		code = ee.code
		if ee.msg != "" {
			errw.WriteString("skillbox: " + ee.msg + "\n")
		}
	}
	return out.String(), errw.String(), code
}

const (
	examples = "../../examples/skills"
	fixtures = "../../skills/testdata"
)

func TestSkillsValidateCommand(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		code      int
		stderrHas []string
	}{
		{name: "examples with extensions", args: []string{"--allow-extensions", examples + "/hello-python", examples + "/shell-tools", examples + "/node-hello", examples + "/guarded-deploy"}},
		{name: "SKILL.md path", args: []string{examples + "/hello-python/SKILL.md"}},
		{name: "strict refuses extension fields", args: []string{examples + "/guarded-deploy"}, code: 1,
			stderrHas: []string{examples + "/guarded-deploy: tags: is an extension field", examples + "/guarded-deploy: requires:"}},
		{name: "one error per line", args: []string{fixtures + "/invalid/many-problems", fixtures + "/valid/full-skill"}, code: 1,
			stderrHas: []string{fixtures + "/invalid/many-problems: description: is required", fixtures + "/invalid/many-problems: license:", "1 of 2 skills invalid"}},
		{name: "missing", args: []string{"/nonexistent/skill"}, code: 1, stderrHas: []string{"/nonexistent/skill: SKILL.md: skill directory does not exist"}},
		{name: "no paths", args: nil, code: 2, stderrHas: []string{"usage:"}},
		{name: "bad flag", args: []string{"--nope", "x"}, code: 2, stderrHas: []string{"usage:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runSkills(t, append([]string{"skills", "validate"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			for _, want := range tt.stderrHas {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}

func TestSkillsShowCommand(t *testing.T) {
	out, _, code := runSkills(t, "skills", "show", "--json", fixtures+"/valid/full-skill")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var props map[string]any
	if err := json.Unmarshal([]byte(out), &props); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if props["allowed-tools"] != "Bash(git status:*) Read Grep" || props["metadata"].(map[string]any)["version"] != "1.0" {
		t.Errorf("properties = %v", props)
	}
	out, _, code = runSkills(t, "skills", "show", examples+"/hello-python")
	if code != 0 || !strings.Contains(out, "name:") || !strings.Contains(out, "digest:") {
		t.Errorf("exit %d, out:\n%s", code, out)
	}
	if _, _, code := runSkills(t, "skills", "show"); code != 2 {
		t.Errorf("no path: exit %d, want 2", code)
	}
}

func TestSkillsPromptCommand(t *testing.T) {
	out, _, code := runSkills(t, "skills", "prompt", examples+"/hello-python", examples+"/node-hello")
	if code != 0 || !strings.HasPrefix(out, "<available_skills>\n") || !strings.Contains(out, "<name>node-hello</name>") {
		t.Errorf("exit %d, out:\n%s", code, out)
	}
	abs, _ := filepath.Abs(examples + "/hello-python/SKILL.md")
	if !strings.Contains(out, "<location>"+abs+"</location>") {
		t.Errorf("location not absolute:\n%s", out)
	}
}

func TestSkillsListCommand(t *testing.T) {
	out, stderr, code := runSkills(t, "skills", "list", "--root", fixtures+"/roots/global", "--root", fixtures+"/roots/project", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var list []struct {
		Name, Description, Location, Digest string
		Warnings                            []string
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, s := range list {
		got[s.Name] = s.Description
		if !strings.HasPrefix(s.Digest, "sha256:") || !filepath.IsAbs(s.Location) || s.Warnings == nil {
			t.Errorf("entry %+v", s)
		}
	}
	if got["shared"] != "Shared skill, project version." || len(list) != 5 {
		t.Errorf("list = %v", got)
	}
	if !strings.Contains(stderr, "broken: description: is required") {
		t.Errorf("problem not reported:\n%s", stderr)
	}
	if _, _, code := runSkills(t, "skills", "list"); code != 2 {
		t.Errorf("no root: exit %d, want 2", code)
	}
	if _, _, code := runSkills(t, "skills", "list", "--root", filepath.Join(t.TempDir(), "missing")); code != 1 {
		t.Errorf("missing root: exit %d, want 1", code)
	}
}

func TestReadCommand(t *testing.T) {
	want, _ := os.ReadFile(examples + "/hello-python/references/usage.md")
	out, _, code := runSkills(t, "read", "--root", examples, "hello-python", "references/usage.md")
	if code != 0 || out != string(want) {
		t.Errorf("exit %d, out %q", code, out)
	}
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("secret"), 0o644)
	root := t.TempDir()
	skill := filepath.Join(root, "s")
	os.Mkdir(skill, 0o755)
	os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: s\ndescription: x\n---\n"), 0o644)
	os.Symlink(outside, filepath.Join(skill, "link"))
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"dotdot", []string{"s", "../s/SKILL.md"}, 1, "refused"},
		{"absolute", []string{"s", outside}, 1, "absolute paths are not allowed"},
		{"symlink out", []string{"s", "link"}, 1, "outside the skill directory"},
		{"directory", []string{"s", "."}, 1, "skill directory itself"},
		{"missing file", []string{"s", "nope"}, 1, "not found"},
		{"path-like skill", []string{"../s", "SKILL.md"}, 1, "not paths"},
		{"unknown skill", []string{"t", "SKILL.md"}, 1, "no skill named"},
		{"one arg", []string{"s"}, 2, "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code := runSkills(t, append([]string{"read", "--root", root}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.msg) || out != "" {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tt.code, out, stderr, tt.msg)
			}
			if strings.Count(stderr, "\n") != 1 {
				t.Errorf("message is not one line: %q", stderr)
			}
		})
	}
}
