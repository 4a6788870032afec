//go:build integration

package main

// A daemon session's own workspace over the socket: files uploaded once
// through the files API, runs that build on each other's files, a change
// made through the files API during a run (a conflict), a script that
// swaps a file for a link out, hostile paths and the quota, with a canary
// outside that nothing touches and a daemon that stays up.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
)

func TestDaemonSessionWorkspace(t *testing.T) {
	needDaemon(t)
	runItNeedImage(t, "shell")
	root := extraSkill(t, "ws-steps", "scripts/step.sh", `set -e
case "$1" in
one) cat in/seed.txt > a.txt; echo one >> a.txt ;;
two) cat a.txt > b.txt; echo two >> b.txt ;;
three) cat b.txt > c.txt; echo three >> c.txt ;;
slow) echo started; sleep 4; echo from-run > shared.txt ;;
swap) rm -f a.txt; ln -s /etc/shadow a.txt ;;
fill) head -c 70000000 /dev/zero > big.bin; echo small > small.txt ;;
esac
`)
	d := newItDaemon(t, root)
	d.start()
	cl := d.client()
	ctx := ctxT(t)
	sid := must[*api.CreateSessionResult](t, "create")(cl.CreateSession(ctx, api.Peer{}, api.CreateSessionParams{})).SessionID
	must[*api.LoadResult](t, "load")(cl.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"ws-steps"}}))
	canary := filepath.Join(d.base, "canary.txt")
	os.WriteFile(canary, []byte("canary\n"), 0o644)
	run := func(arg string) *api.RunScriptResult {
		t.Helper()
		res, err := cl.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{arg}}, Skill: "ws-steps", Path: "scripts/step.sh"})
		if err != nil {
			t.Fatalf("run %s: %v", arg, err)
		}
		return res
	}
	read := func(p string) string {
		t.Helper()
		r, err := cl.ReadWorkspace(ctx, api.Peer{}, api.WorkspaceReadParams{SessionID: sid, Path: p})
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		return string(r.Data)
	}

	// Upload once; three runs build on each other; read the end back.
	host := t.TempDir()
	os.MkdirAll(filepath.Join(host, "in"), 0o755)
	os.WriteFile(filepath.Join(host, "in", "seed.txt"), []byte("seed\n"), 0o644)
	large := bytes.Repeat([]byte("0123456789abcdef"), (3*api.MaxWorkspaceChunk+123)/16)
	os.WriteFile(filepath.Join(host, "in", "large.bin"), large, 0o644)
	if rep, err := cl.UploadDir(ctx, sid, host, ""); err != nil || rep.Files != 2 || rep.Bytes != int64(len(large))+5 {
		t.Fatalf("upload: %+v %v", rep, err)
	}
	for _, step := range []string{"one", "two", "three"} {
		if res := run(step); res.ExitCode != 0 || res.Workspace == nil || res.Workspace.Kind != api.WorkspaceSession {
			t.Fatalf("step %s: exit %d, workspace %+v\n%s", step, res.ExitCode, res.Workspace, res.Stderr)
		}
	}
	if got := read("c.txt"); got != "seed\none\ntwo\nthree\n" {
		t.Errorf("c.txt = %q", got)
	}
	back := t.TempDir()
	if rep, err := cl.DownloadDir(ctx, sid, "", back); err != nil || rep.Files < 4 {
		t.Errorf("download: %+v %v", rep, err)
	}
	if b, _ := os.ReadFile(filepath.Join(back, "c.txt")); string(b) != "seed\none\ntwo\nthree\n" {
		t.Errorf("downloaded c.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(back, "in", "large.bin")); !bytes.Equal(b, large) {
		t.Errorf("a file of several pieces came back as %d bytes, want %d", len(b), len(large))
	}

	// A change through the files API during a run is a conflict.
	cl.WriteWorkspace(ctx, api.Peer{}, api.WorkspaceWriteParams{SessionID: sid, Path: "shared.txt", Data: []byte("before\n"), Truncate: true})
	done := make(chan *api.RunScriptResult, 1)
	go func() { done <- run("slow") }()
	waitfor.True(t, "the slow run's sandbox", time.Minute, func() bool { return len(d.containers()) > 0 })
	if _, err := cl.WriteWorkspace(ctx, api.Peer{}, api.WorkspaceWriteParams{SessionID: sid, Path: "shared.txt", Data: []byte("from-host\n"), Truncate: true}); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Workspace == nil || len(res.Workspace.Conflicts) != 1 || res.Workspace.Conflicts[0].Path != "shared.txt" {
		t.Errorf("no conflict reported: %+v", res.Workspace)
	}
	if got := read("shared.txt"); got != "from-host\n" {
		t.Errorf("the host's change was overwritten: %q", got)
	}

	// A file swapped for a link out is not followed and is reported.
	res = run("swap")
	if !strings.Contains(strings.Join(res.OutputsSkipped, "\n"), "a.txt") {
		t.Errorf("the link is not reported: %q", res.OutputsSkipped)
	}
	if e, err := cl.StatWorkspace(ctx, api.Peer{}, api.WorkspacePathParams{SessionID: sid, Path: "a.txt"}); err != nil || e.Type != api.WorkspaceEntryFile {
		t.Errorf("a.txt in the workspace after the swap: %+v %v", e, err)
	}

	// Hostile paths are refused, audited, and the daemon stays up.
	for _, bad := range []string{"../canary.txt", "/etc/passwd", "a/../../x", "in/\x00x", ""} {
		if _, err := cl.WriteWorkspace(ctx, api.Peer{}, api.WorkspaceWriteParams{SessionID: sid, Path: bad, Data: []byte("x"), Truncate: true}); err == nil {
			t.Errorf("write %q: accepted", bad)
		}
		if _, err := cl.ReadWorkspace(ctx, api.Peer{}, api.WorkspaceReadParams{SessionID: sid, Path: bad}); err == nil {
			t.Errorf("read %q: accepted", bad)
		}
	}
	if _, err := cl.DeleteWorkspace(ctx, api.Peer{}, api.WorkspaceDeleteParams{SessionID: sid, Path: "..", Recursive: true}); err == nil {
		t.Error("delete ..: accepted")
	}
	// Over the chunk and another session's workspace.
	if _, err := cl.WriteWorkspace(ctx, api.Peer{}, api.WorkspaceWriteParams{SessionID: sid, Path: "x", Data: bytes.Repeat([]byte("x"), api.MaxWorkspaceChunk+1), Truncate: true}); !errors.Is(err, api.ErrLimitExceeded) {
		t.Errorf("a chunk over the cap: %v", err)
	}
	if _, err := cl.ListWorkspace(ctx, api.Peer{}, api.WorkspaceListParams{SessionID: "ses_0000000000000000000000000000000000000000"}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("another session's workspace: %v", err)
	}
	if b, _ := os.ReadFile(canary); string(b) != "canary\n" {
		t.Errorf("the canary changed: %q", b)
	}
	if _, err := cl.ListWorkspace(ctx, api.Peer{}, api.WorkspaceListParams{SessionID: sid}); err != nil {
		t.Errorf("the daemon after the hostile calls: %v", err)
	}
	recs := d.records()
	var writes, refusals int
	for _, r := range recs {
		if r.Event == "workspace.write" {
			writes++
			if r.Outcome == "refused" {
				refusals++
			}
		}
	}
	if writes == 0 || refusals < 5 {
		t.Errorf("audit: %d workspace.write records, %d refused", writes, refusals)
	}

	// Over the quota (64 MiB here): a write through the files API is
	// refused, a run's file that would take the workspace over it is
	// refused by name while the rest comes back.
	if _, err := cl.WriteWorkspace(ctx, api.Peer{}, api.WorkspaceWriteParams{SessionID: sid, Path: "pad.bin", Data: bytes.Repeat([]byte("p"), api.MaxWorkspaceChunk), Truncate: true}); err != nil {
		t.Fatal(err)
	}
	for off := int64(api.MaxWorkspaceChunk); ; off += api.MaxWorkspaceChunk {
		_, err := cl.WriteWorkspace(ctx, api.Peer{}, api.WorkspaceWriteParams{SessionID: sid, Path: "pad.bin", Offset: off, Data: bytes.Repeat([]byte("p"), api.MaxWorkspaceChunk)})
		if err != nil {
			if !errors.Is(err, api.ErrLimitExceeded) || !strings.Contains(err.Error(), "quota") {
				t.Fatalf("a write over the quota: %v", err)
			}
			break
		}
		if off > 80<<20 {
			t.Fatal("the quota let the workspace grow past 80 MiB")
		}
	}
	cl.DeleteWorkspace(ctx, api.Peer{}, api.WorkspaceDeleteParams{SessionID: sid, Path: "pad.bin"})
	res = run("fill")
	refused := ""
	for _, f := range res.Workspace.Refused {
		refused += f.Path + ": " + f.Why + "\n"
	}
	if !strings.Contains(refused, "big.bin") || !strings.Contains(refused, "quota") {
		t.Errorf("big.bin over the quota is not refused by name: %q (outputs truncated %v)", refused, res.OutputsTruncated)
	}
	if got := read("small.txt"); got != "small\n" {
		t.Errorf("small.txt did not come back beside the refused file: %q", got)
	}

	// The session's workspace is root's and closed: another uid can
	// neither list it nor read a file in it, even knowing the path.
	wsDir := filepath.Join(d.stateDir, "workspaces", sid)
	for _, dir := range []string{filepath.Dir(wsDir), wsDir} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: %v %v, want root's 0700", dir, fi, err)
		}
	}
	for _, args := range [][]string{{"ls", wsDir}, {"cat", filepath.Join(wsDir, "c.txt")}, {"stat", filepath.Join(wsDir, "in")}} {
		out, err := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, args...)...).CombinedOutput()
		if err == nil || strings.Contains(string(out), "three") {
			t.Errorf("uid 65534 ran %v: %v %q", args, err, out)
		}
	}

	// Closing the session removes its workspace.
	cl.CloseSession(context.Background(), api.Peer{}, api.SessionParams{SessionID: sid})
	if _, err := os.Stat(wsDir); !os.IsNotExist(err) {
		t.Errorf("the closed session's workspace is still there: %v", err)
	}
}
