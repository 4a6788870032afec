package service_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service"
)

// newBudgetFixture is a service keeping session workspaces under a quota
// per session, a budget per uid and one in total; opts are its options,
// to make the same service again (a restart).
func newBudgetFixture(t *testing.T, quota, perUID, total int64) (f *fixture, opts *service.Options) {
	t.Helper()
	wsRoot := filepath.Join(t.TempDir(), "workspaces")
	opts = &service.Options{}
	f = newFixtureOpts(t, true, serviceConfig, nil, func(o *service.Options) {
		o.SessionWorkspaces, o.WorkspaceQuota = wsRoot, quota
		o.WorkspaceQuotaPerUID, o.WorkspaceQuotaTotal = perUID, total
		*opts = *o
	})
	return f, opts
}

func newLoadedSession(t *testing.T, svc *service.Service, peer api.Peer) string {
	t.Helper()
	ctx := context.Background()
	sid := mustV(svc.CreateSession(ctx, peer, api.CreateSessionParams{})).SessionID
	if _, err := svc.LoadSkills(ctx, peer, api.LoadParams{SessionID: sid, Names: []string{"plain"}}); err != nil {
		t.Fatal(err)
	}
	return sid
}

func wsWrite(svc *service.Service, peer api.Peer, sid, rel string, n int) error {
	_, err := svc.WriteWorkspace(context.Background(), peer, api.WorkspaceWriteParams{SessionID: sid, Path: rel, Data: bytes.Repeat([]byte("w"), n), Truncate: true})
	return err
}

// One uid's session workspaces together stop at its budget, each under
// its own quota; the refusal names what they hold, the limit and the
// sessions. Another uid writes on, up to the daemon's total. Deleting a
// file or closing a session gives its bytes back, and a restart counts
// what the surviving sessions hold.
func TestWorkspaceBudgetAcrossSessions(t *testing.T) {
	f, opts := newBudgetFixture(t, 1000, 2500, 4000)
	svc := f.svc
	var sids []string
	for range 3 {
		sid := newLoadedSession(t, svc, owner)
		sids = append(sids, sid)
		if err := wsWrite(svc, owner, sid, "a.bin", 800); err != nil {
			t.Fatalf("800 bytes in session %d: %v", len(sids), err)
		}
	}
	// 2400 held: 101 more in any session is past 2500.
	err := wsWrite(svc, owner, sids[0], "b.bin", 101)
	if !errors.Is(err, api.ErrLimitExceeded) {
		t.Fatalf("a write past the uid's budget: %v", err)
	}
	for _, want := range []string{"uid 1000", "2501 bytes", "budget of 2500 bytes", "daemon.workspace_quota_per_uid", "hold 2400 bytes", "session " + sids[0] + " 800 bytes", "sessions.close"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	sid4 := newLoadedSession(t, svc, owner)
	if err := wsWrite(svc, owner, sid4, "a.bin", 101); !errors.Is(err, api.ErrLimitExceeded) {
		t.Fatalf("a new session past the uid's budget: %v", err)
	}
	if err := wsWrite(svc, owner, sid4, "a.bin", 100); err != nil {
		t.Fatalf("up to the budget: %v", err)
	}

	// Another uid is not bound by uid 1000's budget: up to the total.
	other := newLoadedSession(t, svc, stranger)
	if err := wsWrite(svc, stranger, other, "mine.bin", 1000); err != nil {
		t.Fatalf("another uid's write: %v", err)
	}
	other2 := newLoadedSession(t, svc, stranger)
	if err := wsWrite(svc, stranger, other2, "mine.bin", 600); !errors.Is(err, api.ErrLimitExceeded) || !strings.Contains(err.Error(), "daemon.workspace_quota_total") {
		t.Fatalf("a write past the daemon's total: %v", err)
	}

	// Released by a deletion and by a closed session.
	ctx := context.Background()
	if _, err := svc.DeleteWorkspace(ctx, owner, api.WorkspaceDeleteParams{SessionID: sids[0], Path: "a.bin"}); err != nil {
		t.Fatal(err)
	}
	if err := wsWrite(svc, owner, sids[0], "b.bin", 800); err != nil {
		t.Fatalf("a write into bytes a deletion gave back: %v", err)
	}
	if _, err := svc.CloseSession(ctx, owner, api.SessionParams{SessionID: sids[2]}); err != nil {
		t.Fatal(err)
	}
	if err := wsWrite(svc, owner, sid4, "c.bin", 800); err != nil {
		t.Fatalf("a write into bytes a closed session gave back: %v", err)
	}

	// A restart: a new service over the same store and workspaces counts
	// what survived (uid 1000: 800, 800, 100+800), before any call.
	restarted := service.New(*opts)
	if err := restarted.SweepSessionWorkspaces(); err != nil {
		t.Fatal(err)
	}
	err = wsWrite(restarted, owner, sid4, "b.bin", 1)
	if !errors.Is(err, api.ErrLimitExceeded) || !strings.Contains(err.Error(), "hold 2500 bytes") {
		t.Fatalf("after a restart, a write past the uid's budget: %v", err)
	}
	if err := wsWrite(restarted, stranger, other2, "mine.bin", 500); err != nil {
		t.Fatalf("after a restart, the other uid within the total: %v", err)
	}
}

// A run's write-back takes its growth from the session owner's budget: a
// file past it is refused by name, naming the budget, and the rest comes
// back.
func TestWorkspaceBudgetRunWriteBack(t *testing.T) {
	f, _ := newBudgetFixture(t, 1000, 1500, 0)
	svc := f.svc
	full := newLoadedSession(t, svc, owner)
	if err := wsWrite(svc, owner, full, "a.bin", 900); err != nil {
		t.Fatal(err)
	}
	sid := newLoadedSession(t, svc, owner)
	if err := wsWrite(svc, owner, sid, "seed.txt", 100); err != nil {
		t.Fatal(err)
	}
	f.rt.RunFunc = func(context.Context, runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{
			Outputs: []runtime.OutputFile{
				{Path: "big.bin", Size: 600, Data: bytes.Repeat([]byte("b"), 600)},
				{Path: "small.txt", Size: 5, Data: []byte("small")},
			},
			Summary: outcome.Summary{Reason: runtime.ReasonExit},
		}, nil
	}
	res, err := svc.RunScript(context.Background(), owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "plain", Path: "scripts/run.sh"})
	if err != nil {
		t.Fatal(err)
	}
	w := res.Workspace
	if w == nil || len(w.Written) != 1 || w.Written[0].Path != "small.txt" || len(w.Refused) != 1 || w.Refused[0].Path != "big.bin" ||
		!strings.Contains(w.Refused[0].Why, "daemon.workspace_quota_per_uid") || !strings.Contains(w.Refused[0].Why, "session "+full+" 900 bytes") {
		t.Fatalf("the run's workspace report: %+v", w)
	}
	// 900 + 100 + 5 held: 496 more is past 1500.
	if err := wsWrite(svc, owner, sid, "x", 496); !errors.Is(err, api.ErrLimitExceeded) {
		t.Fatalf("the write-back was not counted: %v", err)
	}
	if err := wsWrite(svc, owner, sid, "x", 495); err != nil {
		t.Fatal(err)
	}
}

// A fork's copy of the session's workspace is taken from the budget
// before a byte is copied: refused past it; given back when the fork
// fails after the copy (here: this runtime keeps no session sandboxes).
func TestWorkspaceBudgetFork(t *testing.T) {
	f, _ := newBudgetFixture(t, 1000, 1500, 0)
	svc := f.svc
	ctx := context.Background()
	src := newLoadedSession(t, svc, owner)
	if err := wsWrite(svc, owner, src, "a.bin", 800); err != nil {
		t.Fatal(err)
	}
	_, err := svc.ForkSession(ctx, owner, api.SessionParams{SessionID: src})
	if !errors.Is(err, api.ErrLimitExceeded) || !strings.Contains(err.Error(), "(800 bytes) into its fork") || !strings.Contains(err.Error(), "daemon.workspace_quota_per_uid") {
		t.Fatalf("a fork past the budget: %v", err)
	}
	if err := wsWrite(svc, owner, src, "a.bin", 600); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ForkSession(ctx, owner, api.SessionParams{SessionID: src}); errors.Is(err, api.ErrLimitExceeded) || err == nil {
		t.Fatalf("a fork within the budget, on a runtime that forks no sandboxes: %v", err)
	}
	other := newLoadedSession(t, svc, owner)
	if err := wsWrite(svc, owner, other, "b.bin", 900); err != nil {
		t.Fatalf("the failed fork's copy was not given back: %v", err)
	}
}
