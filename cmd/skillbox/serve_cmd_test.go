package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/images"
	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/frame/stack"
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

	// A bad --replica (or SKILLBOX_REPLICA) is refused before anything starts.
	err = newApp().Run([]string{"skillbox", "serve", "--config", cfg, "--replica", "../x"})
	if err == nil || !strings.Contains(err.Error(), "--replica") || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("serve --replica ../x: %v", err)
	}

	// A missing file says so.
	err = newApp().Run([]string{"skillbox", "serve", "--config", filepath.Join(dir, "missing.hcl")})
	if err == nil || !strings.Contains(err.Error(), "missing.hcl") || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing config: %v", err)
	}
}

// serve says at start which configured images are missing and how to build
// them, instead of building one inside the first call that needs it.
func TestServeWarnsAboutMissingImages(t *testing.T) {
	dir := t.TempDir()
	store, err := images.OpenStore(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	recipes, err := images.DefaultRecipes()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse([]byte("image \"ruby\" {\n  extensions = [\".rb\"]\n  interpreter = [\"ruby\"]\n}\n"), "s.hcl")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
	si := &runner.StoreImages{Store: store, Recipes: recipes}
	stack.CheckImages(cfg, si, log)
	out := buf.String()
	for _, name := range []string{"python", "shell", "node"} {
		want := "fix=\"skillbox images build --dir " + store.Dir() + " " + name + "\""
		if !strings.Contains(out, "image="+name) || !strings.Contains(out, want) {
			t.Errorf("no warning naming %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "refused (unavailable) until it is built") {
		t.Errorf("the warning does not say what happens meanwhile:\n%s", out)
	}
	if !strings.Contains(out, "image has no recipe") || !strings.Contains(out, "image=ruby") {
		t.Errorf("no warning about the image without a recipe:\n%s", out)
	}
	buf.Reset()
	si.Build = true
	stack.CheckImages(cfg, si, log)
	if !strings.Contains(buf.String(), "build_on_demand") {
		t.Errorf("with build_on_demand the warning does not say so:\n%s", buf.String())
	}
}
