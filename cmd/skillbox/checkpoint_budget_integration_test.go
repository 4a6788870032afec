//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// checkpointScripts are sess-web's scripts that fill /work as a hostile
// session script would, and report what a restore put back.
var checkpointScripts = map[string]string{
	// A sparse file of argv[1] bytes (no blocks), and argv[2] hard links
	// to one file of argv[3] bytes.
	"scripts/fill.py": `import os, sys
size, links, target = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
with open("/work/sparse", "wb") as f:
    f.truncate(size)
    if size > 5:
        f.seek(size - 5); f.write(b"tail!")
with open("/work/target", "wb") as f:
    f.write(os.urandom(target))
os.makedirs("/work/links", exist_ok=True)
for i in range(links):
    os.link("/work/target", "/work/links/l%04d" % i)
print("filled")
`,
	"scripts/statwork.py": `import json, os
out = {}
for n in ("sparse", "target", "links/l0999"):
    st = os.stat("/work/" + n)
    out[n] = {"size": st.st_size, "blocks": st.st_blocks, "nlink": st.st_nlink, "ino": st.st_ino}
out["tail"] = open("/work/sparse", "rb").read()[-5:].decode() if out["sparse"]["size"] > 5 else ""
print(json.dumps(out))
`,
}

// sparseBytes is the sparse file's size: 1 TiB, or what
// SKILLBOX_TEST_SPARSE_BYTES says (smaller, to show on a build without the
// bounds that a refused pause first writes it all out).
func sparseBytes(t *testing.T) int64 {
	if v := os.Getenv("SKILLBOX_TEST_SPARSE_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 1 << 40
}

// allocatedUnder is the disk the tree under dir takes (st_blocks, each
// inode once).
func allocatedUnder(dir string) int64 {
	var n int64
	seen := map[uint64]bool{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			st := info.Sys().(*syscall.Stat_t)
			if !seen[st.Ino] {
				seen[st.Ino] = true
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// TestSessionCheckpointBounded is the acceptance of bounded checkpoints: a
// session script makes a 1 TiB sparse file and 1,000 hard links to one
// file in /work. An explicit pause and the idle pause are both refused
// before anything is written (the store never holds more than the budget),
// with a reason the session's owner can act on, and the session runs on in
// the same sandbox, as is a fork; the daemon stays up and another uid's
// run works. A
// /work of links and a sparse file that fits is checkpointed as it is
// (the links as links, the holes as holes) and restored so.
func TestSessionCheckpointBounded(t *testing.T) {
	needDaemon(t)
	const budget = 512 << 20
	root := sessionSkillRoot(t)
	for name, body := range checkpointScripts {
		if err := os.WriteFile(filepath.Join(root, "sess-web", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := newItDaemon(t, root)
	f, err := os.OpenFile(d.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, `sessions {
  idle_timeout                  = "3s"
  checkpoint_budget_per_session = "512MiB"
}`)
	f.Close()
	d.start()
	c := d.client()
	ctx := ctxT(t)

	// The checkpoint store's disk, sampled all along.
	store := filepath.Join(d.stateDir, "checkpoints")
	var mu sync.Mutex
	var peak int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			n := allocatedUnder(store)
			mu.Lock()
			peak = max(peak, n)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	stopSampling := func() int64 {
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return peak
	}

	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"sess-web"}}))
	run := func(sid, script string, args ...string) *api.RunScriptResult {
		t.Helper()
		r := must[*api.RunScriptResult](t, script)(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: args}, Path: script}))
		if r.ExitCode != 0 {
			t.Fatalf("%s: exit %d: %s %s", script, r.ExitCode, r.Stdout, r.Stderr)
		}
		return r
	}
	filled := run(sid, "scripts/fill.py", fmt.Sprint(sparseBytes(t)), "1000", fmt.Sprint(1<<20))
	box := filled.SessionSandbox

	// The explicit pause: refused, saying why and what to do.
	began := time.Now()
	_, err = c.PauseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid})
	e := wantKind(t, "pause of a 1 TiB /work", err, api.KindLimitExceeded)
	t.Logf("pause refused in %v: %s", time.Since(began).Round(time.Millisecond), e.Message)
	for _, w := range []string{"refused before anything was written", "the largest file is sparse", "1000 of them hard links", "delete files", "sessions.checkpoint_budget_per_session"} {
		if !strings.Contains(e.Message, w) {
			t.Errorf("the refusal %q lacks %q", e.Message, w)
		}
	}
	if p := sandboxProcs(box); p == "" {
		t.Fatalf("the sandbox %s is gone after a refused pause", box)
	}
	if r := run(sid, "scripts/rand.py"); r.SessionSandbox != box {
		t.Fatalf("after the refused pause the session ran in %s, not its sandbox %s", r.SessionSandbox, box)
	}

	// The idle pause: refused the same way, audited, the sandbox kept.
	var idle *audit.Record
	waitfor.True(t, "an idle checkpoint of "+box+" audited (idle_timeout 3s)", 60*time.Second, func() bool {
		for _, r := range d.records() {
			if r.Event == audit.EventSessionCheckpoint && r.Detail["sandbox"] == box && r.Detail["why"] == "idle" {
				idle = r
			}
		}
		return idle != nil
	})
	if idle.Outcome != audit.OutcomeError || !strings.Contains(idle.Error, "limit exceeded") || !strings.Contains(idle.Error, "checkpoint_budget_per_session") {
		t.Fatalf("the idle pause: outcome %s, error %q", idle.Outcome, idle.Error)
	}
	t.Logf("idle pause audited: %s", idle.Error)
	if p := sandboxProcs(box); p == "" {
		t.Fatalf("the sandbox %s is gone after a refused idle pause", box)
	}
	if r := run(sid, "scripts/rand.py"); r.SessionSandbox != box {
		t.Fatalf("after the refused idle pause the session ran in %s, not %s", r.SessionSandbox, box)
	}

	// A fork of the live session takes a checkpoint of it too: refused
	// the same way, the source session untouched.
	_, err = c.ForkSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid})
	if e := wantKind(t, "fork of a 1 TiB /work", err, api.KindLimitExceeded); !strings.Contains(e.Message, "refused before anything was written") {
		t.Errorf("the fork's refusal: %s", e.Message)
	}
	if r := run(sid, "scripts/rand.py"); r.SessionSandbox != box {
		t.Fatalf("after the refused fork the session ran in %s, not %s", r.SessionSandbox, box)
	}

	// The daemon is up, and another uid's run works.
	out, stderr, code := d.callAsNobody(t, "sessions.create", "")
	if code != 0 {
		t.Fatalf("nobody's sessions.create: exit %d %s", code, stderr)
	}
	var created api.CreateSessionResult
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := d.callAsNobody(t, "skills.load", `{"session_id":"`+created.SessionID+`","names":["sess-web"]}`); code != 0 {
		t.Fatalf("nobody's skills.load: exit %d %s", code, stderr)
	}
	out, stderr, code = d.callAsNobody(t, "skills.run_script", `{"session_id":"`+created.SessionID+`","path":"scripts/rand.py"}`)
	if code != 0 || !strings.Contains(out, `"exit_code": 0`) && !strings.Contains(out, `"exit_code":0`) {
		t.Fatalf("nobody's run: exit %d\n%s\n%s", code, out, stderr)
	}

	// A /work that fits: a 64 MiB sparse file and 1,000 links to an
	// 8 MiB file take what they took on the tmpfs.
	sid2 := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid2, Names: []string{"sess-web"}}))
	run(sid2, "scripts/fill.py", fmt.Sprint(64<<20), "1000", fmt.Sprint(8<<20))
	paused := must[*api.PauseSessionResult](t, "pause")(c.PauseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid2}))
	var ckID, bytes string
	if len(paused.Sandboxes) == 1 {
		ckID, bytes = paused.Sandboxes[0].Checkpoint, fmt.Sprint(paused.Sandboxes[0].Bytes)
	} else {
		// The idle pause came first (idle_timeout 3s).
		for _, r := range d.records() {
			if r.Event == audit.EventSessionCheckpoint && r.SessionID == sid2 && r.Outcome == audit.OutcomeOK {
				ckID, bytes = r.Detail["checkpoint"], r.Detail["bytes"]
			}
		}
	}
	if ckID == "" {
		t.Fatalf("pause: %+v, and no idle checkpoint of %s audited", paused, sid2)
	}
	ck := filepath.Join(store, ckID)
	work, image := allocatedUnder(filepath.Join(ck, "work")), allocatedUnder(filepath.Join(ck, "image"))
	t.Logf("checkpoint of 1,000 links to 8 MiB and a 64 MiB sparse file: work %d bytes, image %d bytes (charged %s bytes)", work, image, bytes)
	if work > 10<<20 {
		t.Errorf("the /work copy takes %d bytes: links or holes were not kept", work)
	}
	// It is charged to its owner's uid (root's, here), as its manifest
	// says for the accounts a restarted daemon reads back.
	var man struct {
		UID       *uint32 `json:"uid"`
		DiskBytes int64   `json:"disk_bytes"`
	}
	if raw, err := os.ReadFile(filepath.Join(ck, "manifest.json")); err != nil || json.Unmarshal(raw, &man) != nil {
		t.Fatalf("manifest of %s: %v", ckID, err)
	}
	if man.UID == nil || *man.UID != 0 || man.DiskBytes <= 0 || man.DiskBytes > 128<<20 {
		t.Errorf("manifest: uid %v, disk_bytes %d", man.UID, man.DiskBytes)
	}
	r := run(sid2, "scripts/statwork.py") // restores the checkpoint
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(strings.SplitN(r.Stdout, "\n", 2)[0]), &raw); err != nil {
		t.Fatalf("statwork: %q: %v", r.Stdout, err)
	}
	got := map[string]struct{ Size, Blocks, Nlink, Ino int64 }{}
	for _, n := range []string{"sparse", "target", "links/l0999"} {
		var v struct{ Size, Blocks, Nlink, Ino int64 }
		if err := json.Unmarshal(raw[n], &v); err != nil {
			t.Fatalf("statwork %s: %v", n, err)
		}
		got[n] = v
	}
	if s := got["sparse"]; s.Size != 64<<20 {
		t.Errorf("the restored sparse file: %+v", s)
	}
	if a, b := got["target"], got["links/l0999"]; a.Nlink != 1001 || a.Ino != b.Ino {
		t.Errorf("the restored links: target %+v, l0999 %+v", a, b)
	}
	if string(raw["tail"]) != `"tail!"` {
		t.Errorf("the restored sparse file lost its data: %s", r.Stdout)
	}
	// What the restore wrote into the sandbox's /work, on the host's
	// tmpfs (gVisor reports st_blocks of its own).
	hostWork := filepath.Join("/run/skillbox/runs", r.SessionSandbox, "work")
	if n := allocatedUnder(hostWork); n == 0 || n > 10<<20 {
		t.Errorf("the restored /work (%s) takes %d bytes on the host: links or holes were not restored", hostWork, n)
	} else {
		t.Logf("the restored /work takes %d bytes on the host's tmpfs (gVisor reports the sparse file as %d blocks)", n, got["sparse"].Blocks)
	}

	if p := stopSampling(); p > budget {
		t.Errorf("the checkpoint store held %d bytes at its peak, more than the %d budget", p, int64(budget))
	} else {
		t.Logf("the checkpoint store's peak: %d bytes (budget %d)", p, int64(budget))
	}
	d.stop()
}
