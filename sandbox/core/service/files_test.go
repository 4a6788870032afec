package service_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service"
)

// newFilesFixture is a daemon's service keeping session workspaces under
// a quota, with a session of owner's where skill plain is loaded.
func newFilesFixture(t *testing.T, quota int64) (f *fixture, sid, dir string) {
	t.Helper()
	wsRoot := filepath.Join(t.TempDir(), "workspaces")
	f = newFixtureOpts(t, true, serviceConfig, nil, func(o *service.Options) {
		o.SessionWorkspaces, o.WorkspaceQuota = wsRoot, quota
	})
	ctx := context.Background()
	sid = mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	if _, err := f.svc.LoadSkills(ctx, owner, api.LoadParams{SessionID: sid, Names: []string{"plain"}}); err != nil {
		t.Fatal(err)
	}
	return f, sid, filepath.Join(wsRoot, sid)
}

// upload writes data into the session's rel in pieces of n bytes.
func upload(t *testing.T, f *fixture, sid, rel string, data []byte, n int) {
	t.Helper()
	for off := 0; off < len(data); off += n {
		piece := data[off:min(off+n, len(data))]
		_, err := f.svc.WriteWorkspace(context.Background(), owner, api.WorkspaceWriteParams{
			SessionID: sid, Path: rel, Offset: int64(off), Data: piece, Truncate: off == 0})
		if err != nil {
			t.Fatalf("writing %s at %d: %v", rel, off, err)
		}
	}
}

// The files API keeps the session's workspace open: an upload in pieces
// opens (and walks) it once, and later calls check the quota against the
// count it keeps, not by walking the tree again.
func TestFilesAPIKeepsSessionWorkspaceOpen(t *testing.T) {
	f, sid, dir := newFilesFixture(t, 1000)
	opens := service.CountWorkspaceOpens(f.svc)
	ctx := context.Background()
	upload(t, f, sid, "up.bin", bytes.Repeat([]byte("u"), 400), 40)
	if _, err := f.svc.StatWorkspace(ctx, owner, api.WorkspacePathParams{SessionID: sid, Path: "up.bin"}); err != nil {
		t.Fatal(err)
	}
	if n := opens.Load(); n != 1 {
		t.Fatalf("10 pieces and a stat opened the workspace %d times, want once", n)
	}
	// A file put there behind the service's back (nothing but the session's
	// runs may) is not walked by the next piece's quota check...
	if err := os.WriteFile(filepath.Join(dir, "behind.bin"), bytes.Repeat([]byte("b"), 550), 0o600); err != nil {
		t.Fatal(err)
	}
	upload(t, f, sid, "more.bin", bytes.Repeat([]byte("m"), 100), 100)
	// ...until something walks the open workspace again (list counts it).
	res := mustV(f.svc.ListWorkspace(ctx, owner, api.WorkspaceListParams{SessionID: sid}))
	if res.Bytes != 1050 {
		t.Fatalf("list counts %d bytes, want 1050", res.Bytes)
	}
	_, err := f.svc.WriteWorkspace(ctx, owner, api.WorkspaceWriteParams{SessionID: sid, Path: "x", Data: []byte("x"), Truncate: true})
	if !errors.Is(err, api.ErrLimitExceeded) {
		t.Fatalf("a write over the quota: err = %v, want %v", err, api.ErrLimitExceeded)
	}
	if n := opens.Load(); n != 1 {
		t.Fatalf("the session's calls opened the workspace %d times, want once", n)
	}
}

// A run of the session changes its workspace behind the files API's open
// one: the next call opens it anew, and its quota check sees the run's
// files.
func TestFilesAPISeesRunChanges(t *testing.T) {
	f, sid, _ := newFilesFixture(t, 1000)
	opens := service.CountWorkspaceOpens(f.svc)
	ctx := context.Background()
	upload(t, f, sid, "a.bin", bytes.Repeat([]byte("a"), 500), 100)
	out := bytes.Repeat([]byte("r"), 400)
	f.rt.RunFunc = func(context.Context, runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{Outputs: []runtime.OutputFile{{Path: "run.bin", Size: int64(len(out)), Data: out}}, Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	res, err := f.svc.RunScript(ctx, owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "plain", Path: "scripts/run.sh"})
	if err != nil {
		t.Fatal(err)
	}
	if w := res.Workspace; w == nil || len(w.Written) != 1 || w.NotApplied != "" {
		t.Fatalf("the run's workspace report: %+v", res.Workspace)
	}
	if got := service.OpenSessionWorkspaces(f.svc); len(got) != 0 {
		t.Fatalf("after the run the files API keeps %q open, want none", got)
	}
	// 500 + 400 held: 200 more is over; the count kept before the run
	// (500) would have let it through.
	_, err = f.svc.WriteWorkspace(ctx, owner, api.WorkspaceWriteParams{SessionID: sid, Path: "b.bin", Data: bytes.Repeat([]byte("b"), 200), Truncate: true})
	if !errors.Is(err, api.ErrLimitExceeded) || !strings.Contains(err.Error(), "it holds 900") {
		t.Fatalf("a write over the quota after the run: err = %v, want %v holding 900", err, api.ErrLimitExceeded)
	}
	if n := opens.Load(); n != 2 {
		t.Fatalf("opened %d times, want twice (before and after the run)", n)
	}
}

// Closing the session closes its open workspace.
func TestCloseSessionDropsOpenWorkspace(t *testing.T) {
	f, sid, dir := newFilesFixture(t, 0)
	upload(t, f, sid, "a.txt", []byte("a"), 1)
	if got := service.OpenSessionWorkspaces(f.svc); !slices.Equal(got, []string{sid}) {
		t.Fatalf("open %q, want the session's", got)
	}
	if _, err := f.svc.CloseSession(context.Background(), owner, api.SessionParams{SessionID: sid}); err != nil {
		t.Fatal(err)
	}
	if got := service.OpenSessionWorkspaces(f.svc); len(got) != 0 {
		t.Fatalf("after close %q open, want none", got)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the closed session's workspace: %v, want it removed", err)
	}
}

// Files API calls of one session, concurrent with each other and with its
// runs, share the open workspace safely (run with -race).
func TestFilesAPIConcurrent(t *testing.T) {
	f, sid, _ := newFilesFixture(t, 1<<20)
	f.rt.RunFunc = func(context.Context, runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{Outputs: []runtime.OutputFile{{Path: "run.txt", Size: 3, Data: []byte("run")}}, Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel := fmt.Sprintf("f%d.txt", i)
			data := bytes.Repeat([]byte{byte('a' + i)}, 200)
			for off := 0; off < len(data); off += 20 {
				if _, err := f.svc.WriteWorkspace(ctx, owner, api.WorkspaceWriteParams{SessionID: sid, Path: rel, Offset: int64(off), Data: data[off : off+20], Truncate: off == 0}); err != nil {
					errs <- err
					return
				}
				if _, err := f.svc.ListWorkspace(ctx, owner, api.WorkspaceListParams{SessionID: sid}); err != nil {
					errs <- err
					return
				}
			}
			got, err := f.svc.ReadWorkspace(ctx, owner, api.WorkspaceReadParams{SessionID: sid, Path: rel})
			if err == nil && !bytes.Equal(got.Data, data) {
				err = fmt.Errorf("%s reads %q", rel, got.Data)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 3 {
			if _, err := f.svc.RunScript(ctx, owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, WorkspaceParams: api.WorkspaceParams{Workspace: service.SessionWorkspaceName}}, Skill: "plain", Path: "scripts/run.sh"}); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
