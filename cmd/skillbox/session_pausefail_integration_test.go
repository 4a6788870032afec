//go:build integration

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// A pause, fork or checkpoint that fails partway (here: the checkpoint
// store is a small tmpfs, and the session's /work does not fit in it)
// must leave nothing of its own behind, and leave the session either
// running as before or closed with the reason; sessions.close, the
// daemon's stop and, after a kill -9, its next start remove everything
// the sandbox had.

// unbudgeted turns the checkpoint budgets' disk share and the free-space
// floor off, so that these checkpoints are not refused when /work is
// reserved (TestSessionCheckpointBounded tests that) but fail partway,
// after the sandbox was frozen: runsc's image or the copy of /work meets
// the full store.
const unbudgeted = "sessions { checkpoint_disk_percent = 0 }\naudit { min_free = 0 }"

// fillScript writes argv[2] MiB of random (incompressible) bytes to
// /work/<argv[1]>.
const fillScript = `import os, sys
with open("/work/" + sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2])):
        f.write(os.urandom(1 << 20))
print("filled", sys.argv[2])
`

// pauseFailDaemon is sessionDaemon with fill.py in sess-web and the
// daemon's checkpoint store on a tmpfs of storeSize that the test mounts
// (and unmounts after the daemon stopped).
func pauseFailDaemon(t *testing.T, storeSize, extraConfig string) (*itDaemon, *client.Client, context.Context, string, string) {
	t.Helper()
	root := sessionSkillRoot(t)
	if err := os.WriteFile(filepath.Join(root, "sess-web", "scripts", "fill.py"), []byte(fillScript), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newItDaemon(t, root)
	if extraConfig != "" {
		f, err := os.OpenFile(d.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(extraConfig + "\n")
		f.Close()
	}
	store := filepath.Join(d.stateDir, "checkpoints")
	if err := os.MkdirAll(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", store, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+storeSize+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs for the checkpoint store: %v", err)
	}
	// Cleanups run last-registered first: the daemon stops before the
	// store is unmounted, then newItDaemon's removes the directories.
	t.Cleanup(func() {
		d.stop()
		if err := unix.Unmount(store, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", store, err)
		}
	})
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"sess-web"}}))
	return d, c, ctx, sid, store
}

// leftovers lists what of sandbox box is on the host: its run dir, its
// skills dir, any mount naming it (in this process's mountinfo), its
// runsc state, its processes.
func (d *itDaemon) leftovers(box string) []string {
	var out []string
	for _, p := range []string{filepath.Join(runtime.DefaultRunDir, box), filepath.Join(d.stateDir, "session-sandboxes", box)} {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, "dir "+p)
		}
	}
	raw, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.Contains(l, box) {
			out = append(out, "mount "+l)
		}
	}
	for _, id := range d.containers() {
		if id == box {
			st, _ := exec.Command(runtime.PinnedRunscPath(), "--root", d.runscDir, "state", box).CombinedOutput()
			out = append(out, "runsc state "+strings.Join(strings.Fields(string(st)), " "))
		}
	}
	if p := sandboxProcs(box); p != "" {
		out = append(out, "processes "+p)
	}
	return out
}

// waitNoLeftovers polls until nothing of box is left, or fails after
// within.
func (d *itDaemon) waitNoLeftovers(t *testing.T, box, when string, within time.Duration) {
	t.Helper()
	waitfor.NoError(t, "nothing of sandbox "+box+" to be left "+when, within, func() error {
		if left := d.leftovers(box); len(left) > 0 {
			return fmt.Errorf("left:\n  %s", strings.Join(left, "\n  "))
		}
		return nil
	})
}

// storeEntries lists the checkpoint store (pending dirs included).
func storeEntries(t *testing.T, store string) []string {
	t.Helper()
	ents, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.Name() != "lost+found" {
			out = append(out, e.Name())
		}
	}
	return out
}

// runscStatus is runsc's status of box ("" when it has none).
func (d *itDaemon) runscStatus(box string) string {
	out, err := exec.Command(runtime.PinnedRunscPath(), "--root", d.runscDir, "list").Output()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == box {
			return f[2]
		}
	}
	return ""
}

// checkAfterFailedCheckpoint checks what a failed checkpoint of box left:
// nothing in the store; and either the session runs on in box, with its
// /work (file) intact and runsc's state running, or box is gone entirely
// and the session's next call says why.
func checkAfterFailedCheckpoint(t *testing.T, d *itDaemon, c *client.Client, ctx context.Context, sid, box, store, file, what string) (runningOn bool) {
	t.Helper()
	if left := storeEntries(t, store); len(left) != 0 {
		t.Errorf("after the failed %s the checkpoint store holds %v", what, left)
	}
	r, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/probe.py"})
	if err == nil && r.SessionSandbox == box {
		if !strings.Contains(r.Stdout, file) {
			t.Errorf("the session runs on in %s after the failed %s, but its /work lost %s: %s", box, what, file, r.Stdout)
		}
		if st := d.runscStatus(box); st != "running" {
			t.Errorf("the session runs on in %s after the failed %s, but runsc says %q", box, what, st)
		}
		return true
	}
	// Not running on: then it must be gone, and the call must have said so.
	if left := d.leftovers(box); len(left) != 0 {
		t.Fatalf("after the failed %s the session's next run went to %v (err %v), and its sandbox %s is half there:\n  %s",
			what, sandboxOf(r), err, box, strings.Join(left, "\n  "))
	}
	var ce *client.Error
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, box) || !strings.Contains(ce.Message, what) {
		t.Fatalf("after the failed %s closed sandbox %s, the session's next run did not say so: %+v, %v", what, box, r, err)
	}
	return false
}

func sandboxOf(r *api.RunScriptResult) string {
	if r == nil {
		return "no sandbox"
	}
	return r.SessionSandbox
}

// TestSessionPauseFailsCleanly: a pause that fails on a full disk leaves
// nothing behind; sessions.close and the daemon's stop remove a session
// whose pause failed.
func TestSessionPauseFailsCleanly(t *testing.T) {
	needDaemon(t)
	d, c, ctx, sid, store := pauseFailDaemon(t, "24m", unbudgeted)
	fill := must[*api.RunScriptResult](t, "fill")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"big", "48"}}, Path: "scripts/fill.py"}))
	box := fill.SessionSandbox
	if fill.ExitCode != 0 || box == "" {
		t.Fatalf("fill: %+v", fill)
	}
	_, err := c.PauseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid})
	if err == nil {
		t.Fatalf("48 MiB of /work paused into a 24 MiB checkpoint store")
	}
	t.Logf("pause refused: %v", err)
	runningOn := checkAfterFailedCheckpoint(t, d, c, ctx, sid, box, store, "big", "pause")
	var rec *audit.Record
	for _, r := range d.records() {
		if r.Event == audit.EventSessionCheckpoint && r.Detail["sandbox"] == box && r.Outcome == audit.OutcomeError {
			rec = r
		}
	}
	if rec == nil || rec.Error == "" || rec.Detail["left"] == "" {
		t.Errorf("the failed pause is not audited with its error and what it left the sandbox in: %+v", rec)
	} else if want := map[bool]string{true: "running", false: "closed"}[runningOn]; rec.Detail["left"] != want {
		t.Errorf("the failed pause's audit says the sandbox was left %q, want %q", rec.Detail["left"], want)
	}

	// sessions.close removes all of it.
	must[*api.CloseSessionResult](t, "close")(c.CloseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	d.waitNoLeftovers(t, box, "after sessions.close of a session whose pause failed", 10*time.Second)

	// The daemon's stop pauses the live sandboxes: one whose pause fails
	// goes, with everything.
	sid2 := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid2, Names: []string{"sess-web"}}))
	fill2 := must[*api.RunScriptResult](t, "fill 2")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid2, Args: []string{"big", "48"}}, Path: "scripts/fill.py"}))
	box2 := fill2.SessionSandbox
	if _, err := c.PauseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid2}); err == nil {
		t.Fatalf("the second pause succeeded")
	}
	d.stop()
	d.waitNoLeftovers(t, box2, "after the daemon stopped with a session whose pause failed", 10*time.Second)
	if left := storeEntries(t, store); len(left) != 0 {
		t.Errorf("after the daemon stopped the checkpoint store holds %v", left)
	}
}

// TestSessionForkFailsCleanly: a fork of a live session that fails on a
// full disk leaves the source running as before and nothing of the fork.
func TestSessionForkFailsCleanly(t *testing.T) {
	needDaemon(t)
	d, c, ctx, sid, store := pauseFailDaemon(t, "24m", unbudgeted)
	fill := must[*api.RunScriptResult](t, "fill")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"big", "48"}}, Path: "scripts/fill.py"}))
	box := fill.SessionSandbox
	f, err := c.ForkSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid})
	if err == nil {
		t.Fatalf("48 MiB of /work forked through a 24 MiB checkpoint store: %+v", f)
	}
	t.Logf("fork refused: %v", err)
	checkAfterFailedCheckpoint(t, d, c, ctx, sid, box, store, "big", "fork")
	for _, id := range d.containers() {
		if id != box {
			t.Errorf("runsc state of a sandbox other than the source's after a failed fork: %s (%s)", id, strings.Join(d.leftovers(id), "; "))
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(d.stateDir, "session-sandboxes")); len(ents) > 1 {
		t.Errorf("skills dirs after a failed fork: %v", ents)
	}
	must[*api.CloseSessionResult](t, "close")(c.CloseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	d.waitNoLeftovers(t, box, "after sessions.close of a session whose fork failed", 10*time.Second)
}

// TestSessionKill9MidPauseSwept: the daemon is killed (-9) while it
// pauses a session sandbox with a background run; the next daemon's start
// removes the sandbox's run dir, mount, runsc state and the half-written
// checkpoint, and the session's next run gets a sandbox.
func TestSessionKill9MidPauseSwept(t *testing.T) {
	needDaemon(t)
	d, c, ctx, sid, store := pauseFailDaemon(t, "512m", "")
	must[*api.RunScriptResult](t, "counter")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8004"}, Background: true}, Path: "scripts/counter.py"}))
	fill := must[*api.RunScriptResult](t, "fill")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"big", "200"}}, Path: "scripts/fill.py"}))
	box := fill.SessionSandbox
	go c.PauseSession(context.Background(), api.Peer{}, api.SessionParams{SessionID: sid})
	waitfor.True(t, "the pause to make something in the checkpoint store", time.Minute, func() bool { return len(storeEntries(t, store)) > 0 })
	d.kill9()
	left := d.leftovers(box)
	t.Logf("after kill -9 mid-pause: store %v; sandbox %s:\n  %s", storeEntries(t, store), box, strings.Join(left, "\n  "))
	d.start()
	c = d.client()
	// The start's sweep (and its resweeps a few seconds later) removes
	// what the killed daemon left.
	d.waitNoLeftovers(t, box, "after a kill -9 mid-pause and a restart", 45*time.Second)
	waitfor.NoError(t, "the half-written checkpoint to leave the store after the restart", 45*time.Second, func() error {
		left := storeEntries(t, store)
		for _, n := range left {
			if strings.HasPrefix(n, ".") {
				return fmt.Errorf("store: %v", left)
			}
		}
		return nil
	})
	logb, _ := os.ReadFile(d.logPath)
	if !strings.Contains(string(logb), box) || !strings.Contains(string(logb), "leftover") {
		t.Errorf("the restart's sweep did not log what it removed of %s", box)
	}
	r := must[*api.RunScriptResult](t, "run after the restart")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/probe.py"}))
	if r.ExitCode != 0 {
		t.Fatalf("run after the restart: %+v", r)
	}
}

// TestSessionPauseImageFailsCleanly: a pause whose runsc image does not
// fit in the checkpoint store (runsc checkpoint itself fails) leaves the
// same: nothing in the store, the session running as before or closed.
func TestSessionPauseImageFailsCleanly(t *testing.T) {
	needDaemon(t)
	d, c, ctx, sid, store := pauseFailDaemon(t, "2m", unbudgeted)
	fill := must[*api.RunScriptResult](t, "fill")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"small", "1"}}, Path: "scripts/fill.py"}))
	box := fill.SessionSandbox
	_, err := c.PauseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid})
	if err == nil {
		t.Fatalf("a session sandbox's image fitted in a 2 MiB checkpoint store")
	}
	t.Logf("pause refused: %v", err)
	checkAfterFailedCheckpoint(t, d, c, ctx, sid, box, store, "small", "pause")
	must[*api.CloseSessionResult](t, "close")(c.CloseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	d.waitNoLeftovers(t, box, "after sessions.close of a session whose pause failed", 10*time.Second)
}
