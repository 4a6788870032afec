//go:build integration

package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/console"
	"github.com/skillbox/skillbox/skills"
)

// TestDaemonConfirmationLockDiff: a real daemon, a pinned skill whose
// script then changes and a policy that holds its runs for confirmation.
// The console's confirmation shows the script's diff against the pinned
// version (kept by the pin beside the lock), and once approved the changed
// script runs in gVisor.
func TestDaemonConfirmationLockDiff(t *testing.T) {
	needDaemon(t)
	root := extraSkill(t, "guarded-lockdiff", "scripts/x.sh", "echo locked-bytes\n")
	d := newItDaemon(t, root)
	d.start()
	defer d.stop()
	ctx := ctxT(t)
	c := d.client()
	digestOf := func() string {
		t.Helper()
		for _, s := range must[[]api.SkillInfo](t, "skills.list")(c.ListSkills(ctx, api.Peer{}, api.ListSkillsParams{})) {
			if s.Name == "guarded-lockdiff" {
				return s.Digest
			}
		}
		t.Fatal("guarded-lockdiff not listed")
		return ""
	}
	res := must[*api.LockResult](t, "skills.lock")(c.LockSkills(ctx, api.Peer{}, api.LockParams{Names: []string{"guarded-lockdiff"}}))
	kept, err := os.ReadDir(skills.LockContentDir(res.LockFile))
	if err != nil || len(kept) != 2 {
		t.Fatalf("the pin kept %d files in %s (%v), want SKILL.md and the script", len(kept), skills.LockContentDir(res.LockFile), err)
	}
	// The kept contents are root's alone (docs/SECURITY.md, host paths):
	// the store 0700, its files 0600, and uid 65534 reaches none of them.
	store := skills.LockContentDir(res.LockFile)
	if fi, err := os.Stat(store); err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("%s: %v %v, want root's 0700", store, fi, err)
	}
	for _, e := range kept {
		f := filepath.Join(store, e.Name())
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: %v %v, want root's 0600", f, fi, err)
		}
		for _, args := range [][]string{{"ls", store}, {"cat", f}, {"stat", f}} {
			if out, err := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, args...)...).CombinedOutput(); err == nil {
				t.Errorf("uid 65534 ran %v: %q", args, out)
			}
		}
	}
	locked := digestOf()
	if err := os.WriteFile(filepath.Join(root, "guarded-lockdiff", "scripts", "x.sh"), []byte("echo changed-bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "the skill's digest to change after the edit (hot reload)", time.Minute, func() bool { return digestOf() != locked })
	current := digestOf()

	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"guarded-lockdiff"}}))
	req := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/x.sh"}
	_, err = c.RunScript(ctx, api.Peer{}, req)
	conf, _ := wantKind(t, "guarded run", err, api.KindConfirmationRequired).ConfirmationRequired()

	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", console.ConsoleSocket(d.socket))
	}}}
	resp, err := hc.Get("http://console" + console.Prefix + "/confirmations/" + conf.ConfirmationID)
	if err != nil {
		t.Fatal(err)
	}
	var shown api.Confirmation
	err = json.NewDecoder(resp.Body).Decode(&shown)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the confirmation: %d %v", resp.StatusCode, err)
	}
	dt := shown.Details
	if !strings.HasPrefix(dt["lock"], "differs from the lock") || !strings.Contains(dt["lock"], locked) || !strings.Contains(dt["lock"], current) {
		t.Errorf("lock = %q, want it to differ, naming %s and %s", dt["lock"], locked, current)
	}
	if dt["lock_changes"] != "modified scripts/x.sh" {
		t.Errorf("lock_changes = %q", dt["lock_changes"])
	}
	for _, s := range []string{"--- a/scripts/x.sh", "+++ b/scripts/x.sh", "-echo locked-bytes", "+echo changed-bytes"} {
		if !strings.Contains(dt["lock_diff"], s) {
			t.Errorf("lock_diff lacks %q:\n%s", s, dt["lock_diff"])
		}
	}
	if dt["lock_notes"] != "" {
		t.Errorf("lock_notes = %q, want none", dt["lock_notes"])
	}

	must[*api.Confirmation](t, "approve")(c.ApproveConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: conf.ConfirmationID}))
	req.ConfirmationID = conf.ConfirmationID
	if r := must[*api.RunScriptResult](t, "approved run")(c.RunScript(ctx, api.Peer{}, req)); !strings.Contains(r.Stdout, "changed-bytes") {
		t.Errorf("approved run: %+v", r)
	}
}
