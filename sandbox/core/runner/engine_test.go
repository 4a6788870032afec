package runner_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/skills"
)

func TestCleanScriptPath(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" means an error is expected
		msg  string // substring of the error
	}{
		{"scripts/run.py", "scripts/run.py", ""},
		{"./scripts/run.py", "scripts/run.py", ""},
		{"scripts//sub/./run.sh", "scripts/sub/run.sh", ""},
		{"scripts/a/b/c.js", "scripts/a/b/c.js", ""},
		{"", "", "empty"},
		{"/scripts/run.py", "", "absolute"},
		{"/etc/passwd", "", "absolute"},
		{"scripts/../SKILL.md", "", ".."},
		{"../other/scripts/run.py", "", ".."},
		{"scripts/../../etc/passwd", "", ".."},
		{"scripts/..", "", ".."},
		{"scripts/run.py\x00.txt", "", "NUL"},
		{"SKILL.md", "SKILL.md", ""}, // policy and the interpreter decide
		{"references/tool.py", "references/tool.py", ""},
		{"core/gif.py", "core/gif.py", ""},
		{"scripts/", "scripts", ""},
		{".", "", "skill root"},
		{"./", "", "skill root"},
		{"scripts/..", "", ".."},
	} {
		got, err := runner.CleanScriptPath(tc.in)
		if tc.want != "" {
			if err != nil || got != tc.want {
				t.Errorf("runner.CleanScriptPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("runner.CleanScriptPath(%q) = %q, want an error", tc.in, got)
			continue
		}
		if !errors.Is(err, api.ErrInvalidParams) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("runner.CleanScriptPath(%q) error %v, want invalid params mentioning %q", tc.in, err, tc.msg)
		}
	}
}

const engineConfig = `
limits {
  timeout = "30s"
  memory  = "256MiB"
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
  env    = ["K"]
}
policy "tight" {
  skills = ["tool"]
  limits {
    pids = 16
  }
}
policy "online" {
  skills  = ["netter"]
  network = true
}
`

func newTestEngine(t *testing.T, config string, with ...func(*runner.Options)) (*runner.Engine, *servicetest.Runtime) {
	t.Helper()
	cfg, err := policy.Parse([]byte(config), "engine.hcl")
	if err != nil {
		t.Fatal(err)
	}
	rt := &servicetest.Runtime{}
	o := runner.Options{Config: cfg, Images: &servicetest.Images{}, Runtime: rt, Pins: servicetest.LivePins{}}
	for _, f := range with {
		f(&o)
	}
	return runner.New(o), rt
}

func engineSkill(t *testing.T, name string) *skills.Skill {
	return servicetest.MakeSkill(t, t.TempDir(), servicetest.SkillSpec{Name: name, Files: map[string]string{
		"scripts/a.py":     "print(1)\n",
		"scripts/b.sh":     "echo 1\n",
		"scripts/c.js":     "console.log(1)\n",
		"scripts/d.mjs":    "console.log(1)\n",
		"scripts/e.bash":   "echo 1\n",
		"scripts/noext":    "#!/usr/bin/env python3\nprint(1)\n",
		"scripts/binsh":    "#!/bin/sh\necho 1\n",
		"scripts/plain":    "just text\n",
		"scripts/x.rb":     "puts 1\n",
		"references/r.py":  "print('not runnable')\n",
		"scripts/sub/f.PY": "print(1)\n",
	}})
}

func TestPrepareInterpreterByExtension(t *testing.T) {
	e, _ := newTestEngine(t, engineConfig)
	sk := engineSkill(t, "tool")
	for _, tc := range []struct {
		script, image, argv0 string
	}{
		{"scripts/a.py", "python", "python3"},
		{"scripts/sub/f.PY", "python", "python3"},
		{"scripts/b.sh", "shell", "bash"},
		{"scripts/e.bash", "shell", "bash"},
		{"scripts/c.js", "node", "node"},
		{"scripts/d.mjs", "node", "node"},
		{"scripts/noext", "python", "python3"}, // shebang fallback
		{"scripts/binsh", "shell", "bash"},
	} {
		p, err := e.Prepare(runner.RunRequest{Skill: sk, Script: tc.script, Args: []string{"x"}})
		if err != nil {
			t.Errorf("%s: %v", tc.script, err)
			continue
		}
		want := []string{tc.argv0, "/skill/" + p.Script(), "x"}
		if p.Interpreter().Image != tc.image || strings.Join(p.Argv(), " ") != strings.Join(want, " ") {
			t.Errorf("%s: image %q argv %q, want %q %q", tc.script, p.Interpreter().Image, p.Argv(), tc.image, want)
		}
		if len(p.ScriptSHA256()) != 64 || !strings.HasPrefix(p.JobID(), runtime.IDPrefix) || !strings.HasPrefix(p.Digest(), "sha256:") {
			t.Errorf("%s: plan %+v", tc.script, p)
		}
	}
	for _, tc := range []struct {
		script string
		target error
		msg    string
	}{
		{"scripts/plain", api.ErrInvalidParams, "no #! line"},
		{"scripts/x.rb", api.ErrInvalidParams, ".rb"},
		{"scripts/missing.py", api.ErrNotFound, "not found"},
		{"scripts", api.ErrInvalidParams, "not a regular file"},
		{"SKILL.md", api.ErrInvalidParams, ".md"},
	} {
		_, err := e.Prepare(runner.RunRequest{Skill: sk, Script: tc.script})
		if !errors.Is(err, tc.target) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want %v mentioning %q", tc.script, err, tc.target, tc.msg)
		}
	}
	// The caller cannot pick the interpreter: a request has no field for
	// it, and args go after the script path.
	p, err := e.Prepare(runner.RunRequest{Skill: sk, Script: "scripts/a.py", Args: []string{"-c", "import os"}})
	if err != nil || p.Argv()[0] != "python3" || p.Argv()[1] != "/skill/scripts/a.py" {
		t.Errorf("args before the script: %q %v", p.Argv(), err)
	}
}

func TestPrepareLimitsOnlyLowered(t *testing.T) {
	e, _ := newTestEngine(t, engineConfig)
	tool := engineSkill(t, "tool")
	other := engineSkill(t, "other")

	p, err := e.Prepare(runner.RunRequest{Skill: other, Script: "scripts/a.py"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Limits().Timeout != 30*time.Second || p.Limits().MemoryBytes != 256<<20 || p.Limits().Pids != runtime.DefaultLimits.Pids {
		t.Errorf("config limits: %+v", p.Limits())
	}
	p, _ = e.Prepare(runner.RunRequest{Skill: tool, Script: "scripts/a.py"})
	if p.Limits().Pids != 16 || !strings.Contains(strings.Join(p.LimitRules(), ";"), `policy "tight"`) {
		t.Errorf("rule limits: %+v from %q", p.Limits(), p.LimitRules())
	}
	// Asking for more is ignored, asking for less is honoured.
	p, _ = e.Prepare(runner.RunRequest{Skill: tool, Script: "scripts/a.py", Limits: runtime.Limits{
		Timeout: time.Hour, MemoryBytes: 8 << 30, Pids: 1000, CPUs: 64,
	}})
	if p.Limits().Timeout != 30*time.Second || p.Limits().MemoryBytes != 256<<20 || p.Limits().Pids != 16 || p.Limits().CPUs != runtime.DefaultLimits.CPUs {
		t.Errorf("raised limits: %+v", p.Limits())
	}
	p, _ = e.Prepare(runner.RunRequest{Skill: tool, Script: "scripts/a.py", Limits: runtime.Limits{
		Timeout: 2 * time.Second, MemoryBytes: 64 << 20, Pids: 4, CPUs: 0.5,
	}})
	if p.Limits().Timeout != 2*time.Second || p.Limits().MemoryBytes != 64<<20 || p.Limits().Pids != 4 || p.Limits().CPUs != 0.5 {
		t.Errorf("lowered limits: %+v", p.Limits())
	}
}

func TestPrepareNetwork(t *testing.T) {
	e, _ := newTestEngine(t, engineConfig)
	tool := engineSkill(t, "tool")
	netter := engineSkill(t, "netter")

	p, err := e.Prepare(runner.RunRequest{Skill: tool, Script: "scripts/a.py"})
	if err != nil || p.Network() {
		t.Fatalf("default network: %v %v", p.Network(), err)
	}
	_, err = e.Prepare(runner.RunRequest{Skill: tool, Script: "scripts/a.py", Network: true})
	if !errors.Is(err, api.ErrDenied) || !strings.Contains(err.Error(), "network") {
		t.Errorf("network without a rule: %v", err)
	}
	// Allowed by a rule, but only when asked for.
	p, err = e.Prepare(runner.RunRequest{Skill: netter, Script: "scripts/a.py"})
	if err != nil || p.Network() {
		t.Errorf("network not asked for: %v %v", p.Network(), err)
	}
	p, err = e.Prepare(runner.RunRequest{Skill: netter, Script: "scripts/a.py", Network: true})
	if err != nil || !p.Network() || !strings.Contains(p.NetworkRule(), `policy "online"`) {
		t.Errorf("network with a rule: %+v %v", p, err)
	}
	// A rule that says false wins over one that says true.
	e2, _ := newTestEngine(t, engineConfig+`
policy "offline" {
  skills  = ["net*"]
  network = false
}
`)
	if _, err := e2.Prepare(runner.RunRequest{Skill: netter, Script: "scripts/a.py", Network: true}); !errors.Is(err, api.ErrDenied) {
		t.Errorf("network = false did not win: %v", err)
	}
}

func TestPrepareDigestBindsTheRun(t *testing.T) {
	e, _ := newTestEngine(t, engineConfig)
	sk := engineSkill(t, "tool")
	base := runner.RunRequest{Skill: sk, Script: "scripts/a.py", Args: []string{"a", "b"}, Env: map[string]string{"K": "v"}}
	p0, err := e.Prepare(base)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := e.Prepare(base)
	if p0.Digest() != p1.Digest() || p0.RunID() == p1.RunID() {
		t.Fatalf("same request: digests %s %s, run ids %s %s", p0.Digest(), p1.Digest(), p0.RunID(), p1.RunID())
	}
	variants := map[string]runner.RunRequest{}
	v := base
	v.Args = []string{"a b"}
	variants["args joined"] = v
	v = base
	v.Args = []string{"b", "a"}
	variants["args order"] = v
	v = base
	v.Env = map[string]string{"K": "w"}
	variants["env value"] = v
	v = base
	v.Stdin = []byte("x")
	variants["stdin"] = v
	v = base
	v.Files = []runtime.InputFile{{Name: "f", Data: []byte("1")}}
	variants["files"] = v
	v = base
	v.Limits = runtime.Limits{Timeout: time.Second}
	variants["limits"] = v
	v = base
	v.Script = "scripts/b.sh"
	variants["script"] = v
	for name, req := range variants {
		p, err := e.Prepare(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Digest() == p0.Digest() {
			t.Errorf("%s: digest unchanged", name)
		}
	}
	// Env values are checked here, before any confirmation or audit.
	for _, env := range []map[string]string{{"LD_PRELOAD": "x"}, {"PATH": "/tmp"}, {"A=B": "x"}, {"K": "a\x00b"}} {
		if _, err := e.Prepare(runner.RunRequest{Skill: sk, Script: "scripts/a.py", Env: env}); !errors.Is(err, api.ErrInvalidParams) {
			t.Errorf("env %q: %v", env, err)
		}
	}
}

func TestExecuteFailClosed(t *testing.T) {
	au := &servicetest.Auditor{}
	e, rt := newTestEngine(t, engineConfig, func(o *runner.Options) { o.Audit = audit.NewJournal(au, nil) })
	sk := engineSkill(t, "tool")
	p, err := e.Prepare(runner.RunRequest{Skill: sk, Script: "scripts/a.py"})
	if err != nil {
		t.Fatal(err)
	}
	au.Fail(errors.New("quota exceeded"))
	if _, err := e.Execute(context.Background(), p, runner.ExecOptions{}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("execute with a failing audit log: %v", err)
	}
	if len(rt.Jobs()) != 0 {
		t.Fatal("ran without audit")
	}
	au.Fail(nil)
	out, err := e.Execute(context.Background(), p, runner.ExecOptions{})
	if err != nil || out.Result.Reason != runtime.ReasonExit {
		t.Fatalf("execute: %+v %v", out, err)
	}
	// A runtime failure is audited as the run's end and reported as internal.
	rt.RunFunc = func(context.Context, runtime.Job) (*runtime.Result, error) {
		return nil, errors.New("runsc exploded")
	}
	if _, err := e.Execute(context.Background(), p, runner.ExecOptions{}); err == nil || !strings.Contains(err.Error(), "runsc exploded") {
		t.Fatalf("runtime failure: %v", err)
	}
	ends := au.Events("run.end")
	if last := ends[len(ends)-1]; last.Outcome != "error" || !strings.Contains(last.Error, "runsc exploded") {
		t.Errorf("failed run's end record: %+v", last)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
