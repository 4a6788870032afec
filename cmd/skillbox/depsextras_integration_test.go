//go:build integration

package main

// Dependencies that do not block what does not need them: a
// requirements.txt of test tooling with no package source, image extras an
// index does not serve, and runs waiting on a layer build that fails or
// takes longer than they may wait. The real binary, a real pip against a
// PEP 503 index the test serves on loopback, runsc sandboxes of the
// python-slim image.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// depsRunResult is the part of `skillbox run --json` these tests read.
type depsRunResult struct {
	ExitCode  int      `json:"exit_code"`
	Stdout    string   `json:"stdout"`
	DepsLayer string   `json:"deps_layer"`
	Warnings  []string `json:"warnings"`
}

func depsSkill(t *testing.T, root, name string, files map[string]string) {
	t.Helper()
	files["SKILL.md"] = fmt.Sprintf("---\nname: %s\ndescription: Dependency test skill. Use only in tests.\n---\n# %s\n", name, name)
	for p, s := range files {
		runItWriteFile(t, filepath.Join(root, name, p), s)
	}
}

func depsRecords(t *testing.T, dir, event string) []*audit.Record {
	t.Helper()
	var out []*audit.Record
	if err := audit.Read(dir, func(r *audit.Record) error {
		if r.Event == event {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		t.Fatalf("reading the audit log %s: %v", dir, err)
	}
	return out
}

// A requirements.txt that lists test tooling no script imports, and no
// package source: the script runs, and the result and run.end say what was
// not installed. A script that imports a missing package is still refused
// with the hint that names it.
func TestDepsUnusedPackagesWithoutSource(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python-slim")
	f := newRunFixture(t)
	audDir := filepath.Join(f.base, "audit")
	depsSkill(t, f.root, "testtools-skill", map[string]string{
		"requirements.txt":        "pytest-cov>=4\npytest-mock\n",
		"scripts/report.py":       "import json, sys\nprint(json.dumps({'ok': True, 'argv': sys.argv[1:]}))\n",
		"tests/test_report.py":    "import pytest_mock\n\ndef test_ok(mocker):\n    pass\n",
		"scripts/needs_numpy2.py": "print('no imports of the declared packages here')\n",
	})
	depsSkill(t, f.root, "needy-skill", map[string]string{
		"requirements.txt": "pytest-cov>=4\nnotinimage-xyz==1.0\n",
		"scripts/use.py":   "import notinimage_xyz\n",
	})
	cfg := filepath.Join(f.base, "nosource.hcl")
	runItWriteFile(t, cfg, fmt.Sprintf("daemon { audit_dir = %q }\nimages { build_on_demand = false }\nimage \"python\" { recipe = \"python-slim\" }\n", audDir))
	const want = "requirements.txt declares pytest-cov, pytest-mock, which no script imports and no package source is configured: not installed"

	t.Run("the script runs, with the warning", func(t *testing.T) {
		o := runItExec(t, "run", "--config", cfg, "--root", f.root, "--json", "testtools-skill", "scripts/report.py")
		if o.code != 0 {
			t.Fatalf("run\n%s", o)
		}
		var res depsRunResult
		if err := json.Unmarshal([]byte(o.stdout), &res); err != nil {
			t.Fatalf("%v\n%s", err, o)
		}
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, `"ok": true`) || res.DepsLayer != "" {
			t.Errorf("result %+v", res)
		}
		if len(res.Warnings) != 1 || res.Warnings[0] != want {
			t.Errorf("warnings %q, want [%q]", res.Warnings, want)
		}
		ends := depsRecords(t, audDir, audit.EventRunEnd)
		if len(ends) == 0 || ends[len(ends)-1].Run == nil || len(ends[len(ends)-1].Run.Warnings) != 1 || ends[len(ends)-1].Run.Warnings[0] != want {
			t.Errorf("run.end does not carry the warning: %+v", ends)
		}
		starts := depsRecords(t, audDir, audit.EventRunStart)
		if len(starts) == 0 || starts[len(starts)-1].Run == nil || len(starts[len(starts)-1].Run.Warnings) != 1 {
			t.Errorf("run.start does not carry the warning")
		}
	})
	t.Run("the terminal shows the warning", func(t *testing.T) {
		o := runItExec(t, "run", "--config", cfg, "--root", f.root, "testtools-skill", "scripts/report.py")
		if o.code != 0 || !strings.Contains(o.stderr, "warning: "+want) {
			t.Fatalf("run\n%s", o)
		}
	})
	t.Run("an imported package still refuses the run", func(t *testing.T) {
		o := runItExec(t, "run", "--config", cfg, "--root", f.root, "needy-skill", "scripts/use.py")
		runItWantError(t, "run needing a missing package", o, 1, "notinimage-xyz==1.0 (requirements.txt:2)", "python_index")
		if strings.Contains(o.stderr, "pytest-cov>=4 (") {
			t.Errorf("the refusal names a package no script imports:\n%s", o.stderr)
		}
	})
}

// An index that serves a skill's package but none of the image's extras:
// the skill's layer builds without them and its script imports its
// package; a script that imports an extra is told it is missing.
func TestDepsExtrasTheIndexLacks(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python-slim")
	needPip(t)
	ver := runVersion()
	ix := &pyIndex{files: map[string][]byte{}, projects: map[string][]string{}}
	file, wheel := testWheel(t, "ownpkg", ver, "ownpkg", "VALUE = 'ownpkg-"+ver+"'\n")
	ix.add("ownpkg", file, wheel)
	srv := httptest.NewServer(ix) // loopback; no python-pptx, no pdfplumber
	t.Cleanup(srv.Close)

	f := newRunFixture(t)
	audDir := filepath.Join(f.base, "audit")
	depsSkill(t, f.root, "extras-skill", map[string]string{
		"requirements.txt":  "ownpkg==" + ver + "\n",
		"scripts/use.py":    "import ownpkg\nprint('got', ownpkg.VALUE)\n",
		"scripts/slides.py": "import pptx\n",
	})
	// python-slim's recipe (the same packages: the built image is current)
	// naming extras the index does not have.
	recipes := filepath.Join(f.base, "recipes")
	slim, err := os.ReadFile(filepath.Join(itRepo, "images", "recipes", "python-slim.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	recipe := strings.Replace(string(slim), "  interpreters = ", "  python_extras = [\"python-pptx=="+ver+"\", \"pdfplumber=="+ver+"\"]\n  interpreters = ", 1)
	runItWriteFile(t, filepath.Join(recipes, "python-slim.hcl"), recipe)
	for _, p := range []string{f.root, f.base} {
		filepath.WalkDir(p, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	}
	cfg := filepath.Join(f.base, "skillbox.hcl")
	runItWriteFile(t, cfg, fmt.Sprintf(`
daemon { audit_dir = %q }
images {
  dir             = %q
  recipes_dirs    = [%q]
  build_on_demand = false
}
image "python" { recipe = "python-slim" }
python_index { url = "%s/simple/" }
`, audDir, itImages, recipes, srv.URL))

	o := runItExec(t, "run", "--config", cfg, "--root", f.root, "--json", "extras-skill", "scripts/use.py")
	var res depsRunResult
	json.Unmarshal([]byte(o.stdout), &res)
	if res.DepsLayer != "" {
		t.Cleanup(func() {
			os.RemoveAll(filepath.Join(itImages, "layers", "sha256-"+strings.TrimPrefix(res.DepsLayer, "sha256:")))
		})
	}
	if o.code != 0 || res.ExitCode != 0 || !strings.Contains(res.Stdout, "got ownpkg-"+ver) || res.DepsLayer == "" {
		t.Fatalf("run extras-skill: the skill's layer should build without the extras\n%s", o)
	}
	for _, extra := range []string{"python-pptx==" + ver} {
		found := false
		for _, w := range res.Warnings {
			found = found || strings.Contains(w, extra) && strings.Contains(w, "no wheel")
		}
		if !found {
			t.Errorf("warnings %q do not name the extra %s a script imports", res.Warnings, extra)
		}
	}
	for _, w := range res.Warnings {
		if strings.Contains(w, "pdfplumber") {
			t.Errorf("warning %q names an extra no script imports", w)
		}
	}
	// The layer holds the skill's package and no extra.
	var built *audit.Record
	for _, r := range depsRecords(t, audDir, "deps.build") {
		if r.Outcome == audit.OutcomeOK && r.Detail["layer"] == res.DepsLayer {
			built = r
		}
	}
	if built == nil || !strings.Contains(built.Detail["extras_left_out"], "python-pptx") || !strings.Contains(built.Detail["extras_left_out"], "pdfplumber") {
		t.Errorf("no deps.build record of layer %s names the extras left out: %+v", res.DepsLayer, built)
	}
	r := runItExec(t, "run", "--config", cfg, "--root", f.root, "--json", "extras-skill", "scripts/slides.py")
	var slides depsRunResult
	json.Unmarshal([]byte(r.stdout), &slides)
	if slides.ExitCode == 0 || !strings.Contains(r.stdout, "pptx") {
		t.Errorf("a script importing the missing extra\n%s", r)
	}
}

// slowIndex answers every request for one project after a delay, with a
// 404 (the index has no such project): pip then fails the build. It keeps
// when it last answered.
type slowIndex struct {
	inner   http.Handler
	project string
	delay   time.Duration
	stop    chan struct{} // closed when the test ends: answer now
	mu      sync.Mutex
	last    time.Time
}

func (s *slowIndex) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.Trim(strings.TrimPrefix(r.URL.Path, "/simple/"), "/") != s.project {
		s.inner.ServeHTTP(w, r)
		return
	}
	select {
	case <-time.After(s.delay):
	case <-s.stop:
	case <-r.Context().Done():
	}
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
	http.NotFound(w, r)
}

func (s *slowIndex) lastAnswer() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Runs waiting on a layer build in the daemon: a build that fails ends the
// wait at once with its error; a build that outlasts a run's timeout ends
// that run's wait at its timeout.
func TestDepsWaitingRuns(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python-slim")
	needPip(t)
	ver := runVersion()
	ix := &pyIndex{files: map[string][]byte{}, projects: map[string][]string{}}
	stop := make(chan struct{})
	fail := &slowIndex{inner: ix, project: "slowfail", delay: 3 * time.Second, stop: stop}
	slow := &slowIndex{inner: fail, project: "slowpoke", delay: 40 * time.Second, stop: stop}
	srv := httptest.NewServer(slow)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // before Close: the daemon's pip may still be asking

	root, err := os.MkdirTemp("", "sbdeps25-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	depsSkill(t, root, "failing-skill", map[string]string{
		"requirements.txt": "slowfail==" + ver + "\n",
		"scripts/use.py":   "import slowfail\n",
	})
	depsSkill(t, root, "slow-skill", map[string]string{
		"requirements.txt": "slowpoke==" + ver + "\n",
		"scripts/use.py":   "import slowpoke\n",
	})
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	d := newItDaemonPool(t, 0, root)
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, fmt.Sprintf("image \"python\" { recipe = \"python-slim\" }\npython_index { url = \"%s/simple/\" }\n", srv.URL)...)
	if err := os.WriteFile(d.cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	c := d.client()
	ctx := ctxT(t)

	t.Run("a failed build fails the waiting run at once", func(t *testing.T) {
		sid := must[string](t, "sessions.create")(c.NewSession(ctx))
		lr := must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"failing-skill"}}))
		if dep := lr.ActiveSkills[0].Dependencies; dep == nil || dep.State != "building" {
			t.Fatalf("load receipt dependencies: %+v", dep)
		}
		began := time.Now()
		_, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/use.py"})
		ended := time.Now()
		if err == nil || !strings.Contains(err.Error(), "slowfail") || !strings.Contains(err.Error(), "did not build") {
			t.Fatalf("run_script: %v, want the build's error", err)
		}
		last := fail.lastAnswer()
		t.Logf("waited %s; the index's last answer %s before the run returned: %v", ended.Sub(began), ended.Sub(last), err)
		if last.IsZero() || ended.Sub(last) > time.Second+500*time.Millisecond {
			t.Errorf("the run returned %s after the index's last answer, want within a second of the failure (+ pip's exit)", ended.Sub(last))
		}
		if ended.Sub(began) < fail.delay {
			t.Errorf("the run returned after %s, before the build could fail", ended.Sub(began))
		}
	})

	t.Run("a run waits no longer than its timeout", func(t *testing.T) {
		sid := must[string](t, "sessions.create")(c.NewSession(ctx))
		must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"slow-skill"}}))
		began := time.Now()
		_, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, TimeoutMS: 3000}, Path: "scripts/use.py"})
		took := time.Since(began)
		if err == nil || !strings.Contains(err.Error(), "still building") {
			t.Fatalf("run_script: %v, want the wait to end at the run's timeout", err)
		}
		if took < 3*time.Second || took > 3*time.Second+2*time.Second {
			t.Errorf("the run returned after %s, want its timeout (3s)", took)
		}
	})
}
