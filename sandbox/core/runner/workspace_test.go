package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
)

const workspaceConfig = engineConfig + `
policy "ws-write" {
  skills           = ["writer"]
  workspace        = "write"
  workspace_delete = true
}
policy "ws-none" {
  skills    = ["walled"]
  workspace = "none"
}
`

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, s := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunInWorkspace: the workspace's files join the job's inputs, the
// digest covers them, and what the run wrote and deleted comes back,
// recorded in run.start and run.end.
func TestRunInWorkspace(t *testing.T) {
	au := &servicetest.Auditor{}
	e, rt := newTestEngine(t, workspaceConfig, func(o *runner.Options) { o.Audit = audit.NewJournal(au, nil) })
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"in.txt": "one", "old.txt": "gone soon", "keep/x.txt": "x", ".env": "SECRET=1"})
	rt.RunFunc = func(_ context.Context, job runtime.Job) (*runtime.Result, error) {
		var names []string
		for _, f := range job.Invocation.Files {
			names = append(names, f.Name)
		}
		if strings.Contains(strings.Join(names, ","), ".env") {
			t.Errorf("an excluded file went in: %q", names)
		}
		return &runtime.Result{
			Outputs: []runtime.OutputFile{{Path: "in.txt", Data: []byte("two"), Size: 3, SHA256: sha256Hex([]byte("two"))},
				{Path: "new/made.txt", Data: []byte("made"), Size: 4, SHA256: sha256Hex([]byte("made"))}},
			Summary: outcome.Summary{Reason: runtime.ReasonExit, Deleted: []string{"old.txt"}},
		}, nil
	}
	req := runner.RunRequest{Skill: engineSkill(t, "writer"), Script: "scripts/a.py",
		Files:     []runtime.InputFile{{Name: "call.txt", Data: []byte("c")}},
		Workspace: &runner.WorkspaceRequest{Dir: dir, Kind: api.WorkspaceHost}}
	p, err := e.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	if p.Workspace() == nil || p.Workspace().Grant.Mode != api.WorkspaceWrite || !p.Workspace().Grant.Delete {
		t.Fatalf("plan's workspace: %+v", p.Workspace())
	}
	// What goes in is part of what an approval binds.
	writeFiles(t, dir, map[string]string{"keep/x.txt": "y"})
	p2, err := e.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Digest() == p.Digest() {
		t.Error("the digest does not cover the workspace's files")
	}
	out, err := e.Execute(context.Background(), p2, runner.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ws := out.Workspace
	if ws == nil || len(ws.Written) != 2 || len(ws.Deleted) != 1 || len(ws.Conflicts) != 0 || ws.NotApplied != "" {
		t.Fatalf("report %+v", ws)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "in.txt")); string(b) != "two" {
		t.Errorf("in.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new/made.txt")); string(b) != "made" {
		t.Errorf("new/made.txt = %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "old.txt")); !os.IsNotExist(err) {
		t.Errorf("old.txt was not deleted: %v", err)
	}
	if jobs := rt.Jobs(); len(jobs) != 1 || len(jobs[0].Invocation.Files) < 4 {
		t.Errorf("job files: %+v", jobs)
	}
	start, end := au.Events("run.start"), au.Events("run.end")
	if len(start) != 1 || start[0].Run.Workspace == nil || len(start[0].Run.WorkspaceFiles) == 0 {
		t.Errorf("run.start lacks the workspace: %+v", start)
	}
	if len(end) != 1 || end[0].Run.Workspace == nil || len(end[0].Run.Workspace.Written) != 2 {
		t.Errorf("run.end lacks the changes: %+v", end)
	}
}

func TestRunInWorkspaceRefusals(t *testing.T) {
	e, rt := newTestEngine(t, workspaceConfig)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "a"})
	if _, err := e.Prepare(runner.RunRequest{Skill: engineSkill(t, "walled"), Script: "scripts/a.py",
		Workspace: &runner.WorkspaceRequest{Dir: dir, Kind: api.WorkspaceHost}}); !errors.Is(err, api.ErrDenied) {
		t.Errorf("workspace = none: %v", err)
	}
	if _, err := e.Prepare(runner.RunRequest{Skill: engineSkill(t, "writer"), Script: "scripts/a.py",
		Files:     []runtime.InputFile{{Name: "a.txt", Data: []byte("x")}},
		Workspace: &runner.WorkspaceRequest{Dir: dir, Kind: api.WorkspaceHost}}); !errors.Is(err, api.ErrInvalidParams) || !strings.Contains(err.Error(), "a.txt") {
		t.Errorf("a call's file over a workspace path: %v", err)
	}
	// Read-only by default: nothing comes back, and the report says so.
	rt.RunFunc = func(context.Context, runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{Outputs: []runtime.OutputFile{{Path: "a.txt", Data: []byte("b"), Size: 1}}, Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	out, err := e.Run(context.Background(), runner.RunRequest{Skill: engineSkill(t, "reader"), Script: "scripts/a.py",
		Workspace: &runner.WorkspaceRequest{Dir: dir, Kind: api.WorkspaceHost}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Workspace.Mode != api.WorkspaceRead || out.Workspace.NotApplied == "" {
		t.Errorf("read-only report %+v", out.Workspace)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "a" {
		t.Errorf("a read-only workspace was written: %q", b)
	}
	// A run that did not end by itself applies nothing.
	rt.RunFunc = func(context.Context, runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{Outputs: []runtime.OutputFile{{Path: "a.txt", Data: []byte("b"), Size: 1}}, Summary: outcome.Summary{Reason: runtime.ReasonTimeout}}, nil
	}
	out, err = e.Run(context.Background(), runner.RunRequest{Skill: engineSkill(t, "writer"), Script: "scripts/a.py",
		Workspace: &runner.WorkspaceRequest{Dir: dir, Kind: api.WorkspaceHost}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Workspace.NotApplied == "" || len(out.Workspace.Written) != 0 {
		t.Errorf("timed-out run's report %+v", out.Workspace)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "a" {
		t.Errorf("a timed-out run's file came back: %q", b)
	}
}
