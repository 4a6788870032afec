package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/skills"
)

const depsImageDigest = "sha256:abababababababababababababababababababababababababababababababab"

// depsEngine is an engine over a fake rootfs with python 3.13 (and
// nothing installed) and a layer store in a temp dir.
func depsEngine(t *testing.T, config string, src deps.Sources, with ...func(*runner.Options)) (*runner.Engine, *servicetest.Runtime, string) {
	t.Helper()
	rootfs := t.TempDir()
	for _, d := range []string{"usr/lib/python3.13", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(rootfs, "usr/bin/python3.13"), nil, 0o755)
	images := &servicetest.Images{EnsureFunc: func(_ context.Context, name string) (runtime.ImageRef, string, error) {
		return runtime.ImageRef{Name: name, Digest: depsImageDigest}, rootfs, nil
	}}
	store := t.TempDir()
	e, rt := newTestEngine(t, config, func(o *runner.Options) {
		o.Images = images
		o.Deps = runner.NewDeps(runner.DepsOptions{Builder: &deps.Builder{Store: deps.OpenStore(store), Runtime: o.Runtime, Sources: src}, Config: o.Config, Images: images})
		for _, f := range with {
			f(o)
		}
	})
	return e, rt, rootfs
}

func depsSkill(t *testing.T, name, requirements string) *skills.Skill {
	files := map[string]string{"scripts/run.py": "import tinydep\n"}
	if requirements != "" {
		files["requirements.txt"] = requirements
	}
	return servicetest.MakeSkill(t, t.TempDir(), servicetest.SkillSpec{Name: name, Files: files})
}

func TestDepsRunWithoutDeclarationsMountsNothing(t *testing.T) {
	e, rt, _ := depsEngine(t, engineConfig, deps.Sources{PythonIndex: "http://127.0.0.1:1/simple"})
	out, err := e.Run(context.Background(), runner.RunRequest{Skill: depsSkill(t, "plain", ""), Script: "scripts/run.py"})
	if err != nil {
		t.Fatal(err)
	}
	if out.DepsLayer != "" || rt.Jobs()[0].Sandbox.DepsDir != "" {
		t.Errorf("a skill that declares nothing got layer %q (dir %q)", out.DepsLayer, rt.Jobs()[0].Sandbox.DepsDir)
	}
}

func TestDepsRunRefusedWithoutLayer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		src    deps.Sources
		want   []string
	}{
		{"no source", engineConfig, deps.Sources{}, []string{"tinydep==1.0 (requirements.txt:1)", "python_index", "skillbox deps build needy"}},
		{"not built, fail", engineConfig + "dependencies { when_not_ready = \"fail\" }\n", deps.Sources{PythonIndex: "http://127.0.0.1:1/simple"},
			[]string{"needy", "not built", "skillbox deps build needy"}},
		{"not built, nothing in flight", engineConfig, deps.Sources{PythonIndex: "http://127.0.0.1:1/simple"},
			[]string{"not built", "skills.load builds it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, rt, _ := depsEngine(t, tc.config, tc.src)
			_, err := e.Run(context.Background(), runner.RunRequest{Skill: depsSkill(t, "needy", "tinydep==1.0\n"), Script: "scripts/run.py"})
			if !errors.Is(err, api.ErrUnavailable) {
				t.Fatalf("got %v, want ErrUnavailable", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not mention %q", err, w)
				}
			}
			if n := len(rt.Jobs()); n != 0 {
				t.Errorf("%d jobs ran", n)
			}
		})
	}
}

func TestDepsRunMountsBuiltLayer(t *testing.T) {
	e, rt, rootfs := depsEngine(t, engineConfig, deps.Sources{PythonIndex: "http://127.0.0.1:1/simple"})
	sk := depsSkill(t, "needy", "tinydep==1.0\n")
	set, err := deps.Discover(sk.Dir, deps.Extra{})
	if err != nil {
		t.Fatal(err)
	}
	// A layer as a build leaves it: manifest.json beside tree/.
	p := deps.PlanFor(deps.Request{Image: "python", ImageDigest: depsImageDigest, RootFS: rootfs, Set: set})
	dir := filepath.Join(e.Deps().Builder().Store.Dir(), "sha256-"+strings.TrimPrefix(p.Digest, "sha256:"))
	if err := os.MkdirAll(filepath.Join(dir, "tree", "python", "tinydep"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, _ := json.Marshal(deps.Manifest{Digest: p.Digest, Image: "python", ImageDigest: depsImageDigest})
	os.WriteFile(filepath.Join(dir, "manifest.json"), m, 0o644)

	out, err := e.Run(context.Background(), runner.RunRequest{Skill: sk, Script: "scripts/run.py"})
	if err != nil {
		t.Fatal(err)
	}
	job := rt.Jobs()[0]
	if out.DepsLayer != p.Digest || job.Sandbox.DepsDir != filepath.Join(dir, "tree") {
		t.Errorf("layer %q dir %q, want %q in %s", out.DepsLayer, job.Sandbox.DepsDir, p.Digest, dir)
	}
	if !strings.Contains(strings.Join(job.Invocation.ModuleEnv, " "), "/opt/python") {
		t.Errorf("module path %q lacks the layer", job.Invocation.ModuleEnv)
	}
	if r := service.ResultOf(out, 0); r.DepsLayer != p.Digest {
		t.Errorf("result deps_layer %q", r.DepsLayer)
	}
}

func TestCheckSkillNamesMissingImport(t *testing.T) {
	e, _, _ := depsEngine(t, engineConfig, deps.Sources{})
	sk := depsSkill(t, "needy", "")
	res, err := e.CheckSkill(context.Background(), sk)
	if err != nil {
		t.Fatal(err)
	}
	if res.Missing != 1 || len(res.Findings) != 1 || res.Findings[0].Name != "tinydep" || res.Findings[0].Line != 1 || res.Findings[0].File != "scripts/run.py" {
		t.Errorf("check: %+v", res)
	}
}

// Without a package source, declared packages no script imports do not
// stop a run: it runs without them and says so in its result and in the
// run.start and run.end records. One a script imports still refuses it.
func TestDepsUnusedWithoutSource(t *testing.T) {
	const want = "requirements.txt declares pytest-cov, pytest-mock, which no script imports and no package source is configured: not installed"
	for _, tc := range []struct {
		name     string
		files    map[string]string
		src      deps.Sources
		wantErr  []string // the run is refused, naming these
		warnings []string
	}{
		{"only test tooling declared", map[string]string{
			"requirements.txt":     "pytest-cov\npytest-mock>=3\n",
			"scripts/run.py":       "import json\nprint(json.dumps({}))\n",
			"tests/test_run.py":    "import pytest_mock\n",
			"scripts/conftest.py":  "import pytest_cov\n",
			"scripts/test_tool.py": "import pytest_cov\n",
		}, deps.Sources{}, nil, []string{want}},
		{"an imported package is still missing", map[string]string{
			"requirements.txt": "pytest-cov\npytest-mock>=3\ntinydep==1.0\n",
			"scripts/run.py":   "print(1)\n",
			"scripts/other.py": "import tinydep\n",
		}, deps.Sources{}, []string{"tinydep==1.0 (requirements.txt:3)", "python_index"}, nil},
		{"an npm registry is no python source", map[string]string{
			"requirements.txt": "pytest-cov\npytest-mock>=3\n",
			"scripts/run.py":   "print(1)\n",
		}, deps.Sources{NpmRegistry: "http://127.0.0.1:1"}, nil, []string{want}},
		{"with a python source every declared package is installed", map[string]string{
			"requirements.txt": "pytest-cov\npytest-mock>=3\n",
			"scripts/run.py":   "print(1)\n",
		}, deps.Sources{PythonIndex: "http://127.0.0.1:1/simple"}, []string{"not built", "skillbox deps build tools"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			au := &servicetest.Auditor{}
			e, rt, _ := depsEngine(t, engineConfig, tc.src, func(o *runner.Options) { o.Audit = audit.NewJournal(au, nil) })
			sk := servicetest.MakeSkill(t, t.TempDir(), servicetest.SkillSpec{Name: "tools", Files: tc.files})
			out, err := e.Run(context.Background(), runner.RunRequest{Skill: sk, Script: "scripts/run.py"})
			if tc.wantErr != nil {
				if !errors.Is(err, api.ErrUnavailable) {
					t.Fatalf("got %v, want ErrUnavailable", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not mention %q", err, w)
					}
				}
				if strings.Contains(err.Error(), "pytest") {
					t.Errorf("%q names the packages no script imports", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rt.Jobs()) != 1 || rt.Jobs()[0].Sandbox.DepsDir != "" || out.DepsLayer != "" {
				t.Errorf("jobs %d, layer %q", len(rt.Jobs()), out.DepsLayer)
			}
			if r := service.ResultOf(out, 0); !slices.Equal(r.Warnings, tc.warnings) {
				t.Errorf("result warnings %q, want %q", r.Warnings, tc.warnings)
			}
			n := 0
			for _, r := range au.Records() {
				if r.Run != nil && (r.Event == "run.start" || r.Event == "run.end") {
					n++
					if !slices.Equal(r.Run.Warnings, tc.warnings) {
						t.Errorf("%s warnings %q, want %q", r.Event, r.Run.Warnings, tc.warnings)
					}
				}
			}
			if n != 2 {
				t.Errorf("%d run records, want 2", n)
			}
			// skillbox run builds before the run: nothing to build, no error.
			if ls, err := e.Deps().Build(context.Background(), sk, sk.Dir); err != nil || len(ls) != 0 {
				t.Errorf("build: %v, %v", ls, err)
			}
		})
	}
}
