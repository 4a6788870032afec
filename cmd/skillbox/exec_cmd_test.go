package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/core/runner"
)

// parseExec runs only the argument parsing of `skillbox exec`.
func parseExec(t *testing.T, args ...string) (*execOptions, error) {
	t.Helper()
	return parseOnly(execCommand(), parseExecArgs, args)
}

func TestExecArgs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "make.py")
	if err := os.WriteFile(file, []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args           []string
		lang, code     string
		file, codeArgs string
		skills         string
	}{
		{[]string{"--skill", "a", "-c", "print(2)", "--language", "python", "x", "y"}, "python", "print(2)", "", "x y", "a"},
		{[]string{"--skill", "a", "--skill", "b", "--language", "shell", "-c", "echo", "--", "-n"}, "shell", "echo", "", "-n", "a b"},
		{[]string{"--skill", "a", file, "--", "p"}, "", "print(1)\n", file, "p", "a"},
	} {
		o, err := parseExec(t, tc.args...)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if o.language != tc.lang || string(o.code) != tc.code || o.file != tc.file || strings.Join(o.args, " ") != tc.codeArgs || strings.Join(o.skills, " ") != tc.skills {
			t.Errorf("%q: %+v %q", tc.args, o, o.code)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--language", "python", "-c", "1"}, 2, "--skill NAME"},
		{[]string{"--skill", "a"}, 2, "-c CODE or in FILE"},
		{[]string{"--skill", "a", "-c", "1"}, 2, "--language"},
		{[]string{"--skill", "a", "--language", "ruby", "-c", "1"}, 2, `"ruby"`},
		{[]string{"--skill", "a", "--network", "-c", "1"}, 2, "network"},
		{[]string{"--skill", "a", "--stdin", "-", "-"}, 2, "stdin"},
	} {
		_, err := parseExec(t, tc.args...)
		wantExit(t, strings.Join(tc.args, " "), err, tc.code, tc.want)
	}
	if _, err := parseExec(t, "--skill", "a", "/nonexistent/code.py"); err == nil || !strings.Contains(err.Error(), "reading the code") {
		t.Errorf("missing file: %v", err)
	}
}

func TestLanguageForFile(t *testing.T) {
	cfg := policy.Default()
	for name, want := range map[string]string{
		"x.py": "python", "x.sh": "shell", "x.bash": "shell", "x.js": "node", "x.cjs": "node", "x.rb": "", "x": "",
	} {
		if got := runner.LanguageForFile(cfg, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}
