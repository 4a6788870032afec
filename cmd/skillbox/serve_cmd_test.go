package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/policy"
)

// serve (and run) report config errors on one line that names every problem
// by file:line, before touching sockets, state or audit directories.
func TestServeConfigErrorsOneLine(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"../../policy/testdata/invalid/many.hcl", []string{"3 problems", "many.hcl:6: daemon.max_active_skills", "many.hcl:9: limits.memory", `many.hcl:13: policy "p".deny`, "skillbox policy check"}},
		{"../../policy/testdata/invalid/unknown_attr.hcl", []string{"unknown_attr.hcl:", "invalid config:"}},
		{"../../policy/testdata/invalid/syntax.hcl", []string{"syntax.hcl:3:"}},
	} {
		app := newApp()
		err := app.Run([]string{"skillbox", "serve", "--config", tc.file})
		if err == nil {
			t.Fatalf("%s: serve accepted an invalid config", tc.file)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") {
			t.Errorf("%s: error is not one line:\n%s", tc.file, msg)
		}
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q lacks %q", tc.file, msg, w)
			}
		}
		if !errors.Is(err, policy.ErrConfig) {
			t.Errorf("%s: error does not wrap policy.ErrConfig", tc.file)
		}
	}

	// A config without an audit dir cannot serve: every run must be audited.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "noaudit.hcl")
	os.WriteFile(cfg, []byte("daemon {\n  socket = \""+filepath.Join(dir, "s.sock")+"\"\n  state_dir = \""+dir+"\"\n}\n"), 0o644)
	err := newApp().Run([]string{"skillbox", "serve", "--config", cfg})
	if err == nil || !strings.Contains(err.Error(), "audit_dir") || strings.Contains(err.Error(), "\n") {
		t.Errorf("serve without audit_dir: %v", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "s.sock")); serr == nil {
		t.Error("serve opened its socket despite the config error")
	}

	// A missing file says so.
	err = newApp().Run([]string{"skillbox", "serve", "--config", filepath.Join(dir, "missing.hcl")})
	if err == nil || !strings.Contains(err.Error(), "missing.hcl") || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing config: %v", err)
	}
}
