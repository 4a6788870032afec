package service_test

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
	"github.com/skillbox/skillbox/sandbox/core/service"
)

// TestHostWorkspaces: which directories a caller may name as a run's
// workspace, by the service's HostWorkspacePolicy.
func TestHostWorkspaces(t *testing.T) {
	granted := serviceConfig + `
policy "ws" {
  skills          = ["plain"]
  workspace       = "write"
  workspace_paths = ["/**"]
}
`
	me := api.Peer{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: 10, Process: "host"}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("in"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		policy service.HostWorkspacePolicy
		config string
		caller api.Peer
		want   error // nil: the run goes ahead with the workspace
		words  string
	}{
		{"none by default", service.HostWorkspacesNone, granted, me, api.ErrDenied, "no host workspace"},
		{"the process's own user names any", service.HostWorkspacesOwn, serviceConfig, me, nil, ""},
		{"a daemon caller's own directory a rule grants", service.HostWorkspacesGranted, granted, me, nil, ""},
		{"not without a rule", service.HostWorkspacesGranted, serviceConfig, me, api.ErrDenied, "no policy rule grants"},
		{"not somebody else's", service.HostWorkspacesGranted, granted, api.Peer{UID: uint32(os.Getuid()) + 1, PID: 11}, api.ErrDenied, "belongs to uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixtureOpts(t, true, tc.config, nil, func(o *service.Options) { o.HostWorkspaces = tc.policy })
			ctx := context.Background()
			sid := mustV(f.svc.CreateSession(ctx, tc.caller, api.CreateSessionParams{})).SessionID
			if _, err := f.svc.LoadSkills(ctx, tc.caller, api.LoadParams{SessionID: sid, Names: []string{"plain"}}); err != nil {
				t.Fatal(err)
			}
			var seen []string
			f.rt.RunFunc = func(_ context.Context, job runtime.Job) (*runtime.Result, error) {
				for _, in := range job.Invocation.Files {
					seen = append(seen, in.Name)
				}
				return &runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
			}
			res, err := f.svc.RunScript(ctx, tc.caller, api.RunScriptParams{
				RunInputs: api.RunInputs{SessionID: sid, WorkspaceParams: api.WorkspaceParams{Workspace: dir}},
				Path:      "scripts/run.sh",
			})
			if tc.want != nil {
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.words) {
					t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.words)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Workspace == nil || strings.Join(seen, ",") != "in.txt" {
				t.Errorf("workspace %+v, the run saw %q", res.Workspace, seen)
			}
		})
	}
}
