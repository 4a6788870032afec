//go:build integration

package main

// Session workspaces under budgets per uid and for the daemon as a
// whole, over the daemon's real socket with real uids: one uid filling
// workspaces across many sessions stops at its budget, with the refusal
// naming what it holds, the limit and its sessions; another uid's uploads
// still succeed; a run's write-back past the budget is refused by name;
// the daemon's total stops a third uid; a restart counts what survived,
// and a closed session gives its bytes back.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

// wsBudgetConfig are the daemon's workspace bounds in this test: 4 MiB a
// session, 10 MiB and 1 KiB a uid (room for a small file past ten pieces
// of a MiB), 20 MiB in all.
var wsBudgetConfig = `workspace_quota         = "4MiB"
  workspace_quota_per_uid = 10486784
  workspace_quota_total   = "20MiB"`

// callAs makes one call with `skillbox call` as uid (gid the same), the
// params on stdin, and returns its stdout, stderr and exit code.
func (d *itDaemon) callAs(t *testing.T, uid uint32, method string, params any) (string, string, int) {
	t.Helper()
	in, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	return d.runAsUID(t, uid, bytes.NewReader(in), "call", "--socket", d.socket, "--timeout", "3m", method, "-")
}

// uidClient is one uid's calls through `skillbox call`.
type uidClient struct {
	t   *testing.T
	d   *itDaemon
	uid uint32
}

func (c uidClient) ok(method string, params, result any) {
	c.t.Helper()
	out, stderr, code := c.d.callAs(c.t, c.uid, method, params)
	if code != 0 {
		c.t.Fatalf("uid %d %s: exit %d: %s", c.uid, method, code, stderr)
	}
	if result != nil {
		if err := json.Unmarshal([]byte(out), result); err != nil {
			c.t.Fatalf("uid %d %s: %v: %s", c.uid, method, err, out)
		}
	}
}

func (c uidClient) session(skills ...string) string {
	c.t.Helper()
	var r api.CreateSessionResult
	c.ok("sessions.create", map[string]any{}, &r)
	if len(skills) > 0 {
		c.ok("skills.load", api.LoadParams{SessionID: r.SessionID, Names: skills}, nil)
	}
	return r.SessionID
}

// write writes one piece; it returns the refusal's stderr ("" when it
// was written).
func (c uidClient) write(sid, rel string, off int64, n int) string {
	c.t.Helper()
	p := map[string]any{"session_id": sid, "path": rel, "offset": off, "truncate": off == 0,
		"data": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("w"), n))}
	_, stderr, code := c.d.callAs(c.t, c.uid, "workspace.write", p)
	if code != 0 {
		return stderr
	}
	return ""
}

// fill uploads MiB pieces into rel of sid until n are written or one is
// refused; it returns how many were written and the refusal.
func (c uidClient) fill(sid, rel string, n int) (int, string) {
	c.t.Helper()
	for i := range n {
		if why := c.write(sid, rel, int64(i)<<20, 1<<20); why != "" {
			return i, why
		}
	}
	return n, ""
}

func TestDaemonWorkspaceBudgets(t *testing.T) {
	needDaemon(t)
	runItNeedImage(t, "shell")
	root := extraSkill(t, "ws-budget", "scripts/fill.sh", `set -e
head -c 2000000 /dev/zero > big.bin
echo small > small.txt
`)
	d := newItDaemon(t, root)
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	withBudgets := strings.Replace(string(cfg), `workspace_quota   = "64MiB"`, wsBudgetConfig, 1)
	if withBudgets == string(cfg) {
		t.Fatal("the daemon's config has no workspace_quota line to replace")
	}
	if err := os.WriteFile(d.cfgPath, []byte(withBudgets), 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	nobody := uidClient{t, d, 65534}
	other := uidClient{t, d, 65533}

	// uid 65534 fills 3 MiB in one session after another: it stops at
	// 10 MiB, one MiB into the fourth, however many sessions it opens.
	var sids []string
	stored := 0
	var refusal string
	for i := 0; i < 8 && refusal == ""; i++ {
		sid := nobody.session("ws-budget")
		sids = append(sids, sid)
		var n int
		n, refusal = nobody.fill(sid, "data.bin", 3)
		stored += n
	}
	if refusal == "" || stored != 10 {
		t.Fatalf("uid 65534 stored %d MiB in %d sessions of 4 MiB each, and nothing refused it at its 10 MiB budget (refusal %q)", stored, len(sids), refusal)
	}
	for _, want := range []string{"limit_exceeded", "uid 65534", "budget of 10486784 bytes (10.0 MiB)", "daemon.workspace_quota_per_uid",
		"they hold 10485760 bytes", "session " + sids[0] + " 3145728 bytes (3.0 MiB)", "workspace.delete", "sessions.close"} {
		if !strings.Contains(refusal, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, refusal)
		}
	}
	t.Logf("uid 65534 stopped at %d MiB in %d sessions: %s", stored, len(sids), strings.TrimSpace(refusal))
	// A new session of the same uid is refused just the same.
	if why := nobody.write(nobody.session(), "x", 0, 1<<20); !strings.Contains(why, "daemon.workspace_quota_per_uid") {
		t.Errorf("a new session of the same uid: %q", why)
	}

	// Another uid's uploads still succeed.
	osid := other.session()
	if n, why := other.fill(osid, "mine.bin", 3); n != 3 {
		t.Fatalf("uid 65533's upload: %d MiB, then %s", n, why)
	}

	// A run's write-back past the budget: big.bin is refused by name,
	// naming the budget; small.txt comes back.
	last := sids[len(sids)-1]
	var res api.RunScriptResult
	nobody.ok("skills.run_script", api.RunScriptParams{RunInputs: api.RunInputs{SessionID: last}, Skill: "ws-budget", Path: "scripts/fill.sh"}, &res)
	if res.ExitCode != 0 || res.Workspace == nil {
		t.Fatalf("the run: exit %d, workspace %+v, stderr %s", res.ExitCode, res.Workspace, res.Stderr)
	}
	refused := ""
	for _, f := range res.Workspace.Refused {
		refused += f.Path + ": " + f.Why + "\n"
	}
	if !strings.Contains(refused, "big.bin") || !strings.Contains(refused, "daemon.workspace_quota_per_uid") {
		t.Errorf("big.bin past the uid's budget is not refused by name: %q", refused)
	}
	if len(res.Workspace.Written) != 1 || res.Workspace.Written[0].Path != "small.txt" {
		t.Errorf("the run's write-back: %+v", res.Workspace.Written)
	}
	t.Logf("the run's write-back: %s", strings.TrimSpace(refused))

	// The daemon's total: root (the approver here, under its own per-uid
	// budget too) fills until the daemon's 20 MiB: 10 MiB and 6 bytes of
	// uid 65534, 3 MiB of uid 65533, so root stops short of 7 MiB.
	cl := d.client()
	ctx := ctxT(t)
	rootStored := 0
	var totalErr error
	for s := 0; s < 3 && totalErr == nil; s++ {
		sid := must[*api.CreateSessionResult](t, "create")(cl.CreateSession(ctx, api.Peer{}, api.CreateSessionParams{})).SessionID
		for i := range 4 {
			_, err := cl.WriteWorkspace(ctx, api.Peer{}, api.WorkspaceWriteParams{SessionID: sid, Path: "r.bin", Offset: int64(i) << 20, Data: bytes.Repeat([]byte("r"), 1<<20), Truncate: i == 0})
			if err != nil {
				totalErr = err
				break
			}
			rootStored++
		}
	}
	if !errors.Is(totalErr, api.ErrLimitExceeded) || rootStored != 6 || !strings.Contains(totalErr.Error(), "daemon.workspace_quota_total") || !strings.Contains(totalErr.Error(), "total budget of 20971520 bytes") {
		t.Fatalf("root stored %d MiB before %v; want 6 MiB, then the daemon's total", rootStored, totalErr)
	}
	t.Logf("root stopped at %d MiB: %v", rootStored, totalErr)

	// A restart counts what the surviving sessions hold: uid 65534 is
	// still at its budget.
	d.stop()
	d.start()
	if why := nobody.write(sids[0], "after.bin", 0, 1<<20); !strings.Contains(why, "they hold 10485766 bytes") {
		t.Errorf("after a restart, uid 65534's write: %q", why)
	}
	// A fork copies the session's workspace: refused before the copy.
	if _, why, code := d.callAs(t, 65534, "sessions.fork", api.SessionParams{SessionID: sids[1]}); code == 0 || !strings.Contains(why, "(3145728 bytes) into its fork") || !strings.Contains(why, "daemon.workspace_quota_per_uid") {
		t.Errorf("a fork past the uid's budget: exit %d: %s", code, why)
	}
	// Closing a session gives its bytes back (and the daemon's).
	nobody.ok("sessions.close", api.SessionParams{SessionID: sids[0]}, nil)
	if why := nobody.write(sids[1], "after.bin", 0, 1<<20); why != "" {
		t.Errorf("after closing a session of 3 MiB, uid 65534's write of 1 MiB: %s", why)
	}
	if why := other.write(osid, "more.bin", 0, 1<<20); why != "" {
		t.Errorf("after uid 65534 closed a session, uid 65533's write: %s", why)
	}
	// Deleting a file gives back too.
	nobody.ok("workspace.delete", api.WorkspaceDeleteParams{SessionID: sids[1], Path: "data.bin"}, nil)
	if n, why := nobody.fill(sids[2], "more.bin", 1); n != 1 {
		t.Errorf("after deleting 3 MiB, uid 65534's write: %s", why)
	}
	// Writers of one uid in several sessions at once: uid 65534 holds
	// 6 MiB and 6 bytes (1 + 4 + 1 MiB, small.txt), so of eight pieces of
	// a MiB in eight sessions at once exactly four fit its budget (uid
	// 65533 frees its 4 MiB first, so the total is not what stops them).
	other.ok("workspace.delete", api.WorkspaceDeleteParams{SessionID: osid, Path: "mine.bin"}, nil)
	other.ok("workspace.delete", api.WorkspaceDeleteParams{SessionID: osid, Path: "more.bin"}, nil)
	var par []string
	for range 8 {
		par = append(par, nobody.session())
	}
	whys := make(chan string, len(par))
	for _, sid := range par {
		go func() { whys <- nobody.write(sid, "p.bin", 0, 1<<20) }()
	}
	fit := 0
	for range par {
		why := <-whys
		switch {
		case why == "":
			fit++
		case !strings.Contains(why, "daemon.workspace_quota_per_uid"):
			t.Errorf("a concurrent writer: %s", why)
		}
	}
	if fit != 4 {
		t.Errorf("%d of 8 concurrent pieces of a MiB went through, want 4", fit)
	}
	if _, err := cl.ListWorkspace(ctx, api.Peer{}, api.WorkspaceListParams{SessionID: must[*api.CreateSessionResult](t, "create")(cl.CreateSession(ctx, api.Peer{}, api.CreateSessionParams{})).SessionID}); err != nil {
		t.Errorf("the daemon after the refusals: %v", err)
	}
}
