package skills

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const patchSkillMD = "---\nname: demo\ndescription: A skill to patch.\n---\nLine one.\nLine two.\n"

func patchSkill(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	for rel, content := range map[string]string{"SKILL.md": patchSkillMD, "scripts/run.sh": "echo one\n"} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestApplyDiff(t *testing.T) {
	body := "@@ -5,2 +5,2 @@\n-Line one.\n+Line 1.\n Line two.\n"
	tests := []struct {
		name, diff string
		want       map[string]string // path -> new content ("" = deleted)
		err        string
	}{
		{"plain headers", "--- SKILL.md\n+++ SKILL.md\n" + body, map[string]string{"SKILL.md": strings.Replace(patchSkillMD, "Line one.", "Line 1.", 1)}, ""},
		{"a/ b/ headers", "--- a/SKILL.md\n+++ b/SKILL.md\n" + body, map[string]string{"SKILL.md": strings.Replace(patchSkillMD, "Line one.", "Line 1.", 1)}, ""},
		{"git headers", "diff --git a/SKILL.md b/SKILL.md\n--- a/SKILL.md\n+++ b/SKILL.md\n" + body, map[string]string{"SKILL.md": strings.Replace(patchSkillMD, "Line one.", "Line 1.", 1)}, ""},
		{"new file", "--- /dev/null\n+++ b/references/new.md\n@@ -0,0 +1 @@\n+hello\n", map[string]string{"references/new.md": "hello\n"}, ""},
		{"delete a script", "--- a/scripts/run.sh\n+++ /dev/null\n@@ -1 +0,0 @@\n-echo one\n", map[string]string{"scripts/run.sh": ""}, ""},
		{"context mismatch", "--- a/SKILL.md\n+++ b/SKILL.md\n@@ -5,2 +5,2 @@\n-Line zero.\n+Line 1.\n Line two.\n", nil, "SKILL.md"},
		{"missing file", "--- a/nope.md\n+++ b/nope.md\n@@ -1 +1 @@\n-a\n+b\n", nil, "does not exist"},
		{"escape", "--- a/../other/SKILL.md\n+++ b/../other/SKILL.md\n@@ -1 +1 @@\n-a\n+b\n", nil, ".."},
		{"absolute", "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", nil, "absolute"},
		{"breaks SKILL.md", "--- a/SKILL.md\n+++ b/SKILL.md\n@@ -1,3 +1,2 @@\n ---\n-name: demo\n description: A skill to patch.\n", nil, "SKILL.md after the change"},
		{"renames the skill", "--- a/SKILL.md\n+++ b/SKILL.md\n@@ -2 +2 @@\n-name: demo\n+name: other\n", nil, "SKILL.md after the change"},
		{"deletes SKILL.md", "--- a/SKILL.md\n+++ /dev/null\n@@ -1,6 +0,0 @@\n---\n-name: demo\n-description: A skill to patch.\n----\n-Line one.\n-Line two.\n", nil, ""},
		{"no diff", "just words\n", nil, "changes no file"},
		{"removed line that looks like a header", "--- a/SKILL.md\n+++ b/SKILL.md\n@@ -5 +5 @@\n--- x\n+++ y\n", nil, "SKILL.md: conflict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := patchSkill(t)
			p, err := ApplyDiff(dir, tt.diff, LoadOptions{})
			if tt.want == nil {
				if err == nil || !errors.Is(err, ErrPatch) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ApplyDiff: %v, want an ErrPatch naming %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := p.WriteTo(dir); err != nil {
				t.Fatal(err)
			}
			for rel, want := range tt.want {
				got, err := os.ReadFile(filepath.Join(dir, rel))
				if want == "" {
					if !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s still exists (%v)", rel, err)
					}
					continue
				}
				if string(got) != want {
					t.Errorf("%s = %q, want %q", rel, got, want)
				}
			}
		})
	}
}

func FuzzApplyDiff(f *testing.F) {
	f.Add("--- a/SKILL.md\n+++ b/SKILL.md\n@@ -4,2 +4,2 @@\n-Line one.\n+Line 1.\n Line two.\n")
	f.Add("--- /dev/null\n+++ b/x/../../y\n@@ -0,0 +1 @@\n+z\n")
	dir := patchSkill(f)
	f.Fuzz(func(t *testing.T, diff string) {
		p, err := ApplyDiff(dir, diff, LoadOptions{})
		if err != nil {
			return
		}
		for _, pf := range p.Files {
			// "..0" is a name inside the skill; "..", "../x" and "/x" are not.
			if _, err := cleanRel(pf.Path); err != nil || !filepath.IsLocal(filepath.FromSlash(pf.Path)) {
				t.Fatalf("a path outside the skill got through: %q", pf.Path)
			}
		}
	})
}
