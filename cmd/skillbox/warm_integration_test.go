//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
)

// probePy reports what a run can see of earlier runs, then leaves traces
// of its own: a file in /work and /tmp, an environment variable, a module
// attribute, a global, a process still running.
const probePy = `import json, os, random, subprocess, sys
seen = {
    "random": random.random(),
    "work": sorted(os.listdir(".")),
    "tmp": sorted(os.listdir("/tmp")),
    "env": os.environ.get("SKILLBOX_LEAK"),
    "module": getattr(json, "skillbox_leak", None),
    "global": globals().get("SKILLBOX_LEAK_GLOBAL"),
    "procs": [],
}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            if b"skillbox-leak" in open("/proc/%s/cmdline" % p, "rb").read():
                seen["procs"].append(p)
        except OSError:
            pass
print(json.dumps(seen))
open("left.txt", "w").write("x")
open("/tmp/left.txt", "w").write("x")
os.environ["SKILLBOX_LEAK"] = "1"
json.skillbox_leak = 1
SKILLBOX_LEAK_GLOBAL = 1
subprocess.Popen(["sleep", "600", "skillbox-leak"], start_new_session=True)
if sys.argv[1:] == ["hang"]:
    import time
    print("hanging", flush=True)
    time.sleep(600)
`

type probe struct {
	Random float64  `json:"random"`
	Work   []string `json:"work"`
	Tmp    []string `json:"tmp"`
	Env    *string  `json:"env"`
	Module any      `json:"module"`
	Global any      `json:"global"`
	Procs  []string `json:"procs"`
}

// warmContainers lists the pool's sandboxes among the daemon's containers.
func (d *itDaemon) warmContainers() []string {
	var out []string
	for _, id := range d.containers() {
		if strings.HasPrefix(id, "skillbox-warm-") {
			out = append(out, id)
		}
	}
	return out
}

func (d *itDaemon) waitWarm(t *testing.T, n int) []string {
	t.Helper()
	var ws []string
	waitfor.NoError(t, fmt.Sprintf("%d warm sandboxes", n), 3*time.Minute, func() error {
		if ws = d.warmContainers(); len(ws) < n {
			return fmt.Errorf("%d warm sandboxes (containers %v)", len(ws), d.containers())
		}
		return nil
	})
	return ws
}

// TestDaemonWarmPool: a real `skillbox serve` with a warm pool. Loading a
// skill boots sandboxes; two warm runs share nothing (files, processes,
// environment, interpreter state) and draw different random numbers;
// changing the skill's files drains its pool and the next run uses the new
// version; a kill -9 with a job in flight and sandboxes waiting leaves
// nothing running once the daemon is back.
func TestDaemonWarmPool(t *testing.T) {
	needDaemon(t)
	root := extraSkill(t, "prober", "scripts/probe.py", probePy)
	d := newItDaemonPool(t, 2, root)
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"prober"}}))
	d.waitWarm(t, 2)

	run := func(args ...string) (*api.RunScriptResult, probe) {
		t.Helper()
		res := must[*api.RunScriptResult](t, "run_script")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: args}, Path: "scripts/probe.py"}))
		if res.ExitCode != 0 {
			t.Fatalf("probe exited %d: %s", res.ExitCode, res.Stderr)
		}
		var p probe
		line, _, _ := strings.Cut(res.Stdout, "\n")
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("probe output %q: %v", res.Stdout, err)
		}
		return res, p
	}
	// A sandbox listed may still be booting, and a run then goes cold:
	// run until two ran warm.
	var warm []*api.RunScriptResult
	var probes []probe
	for i := 0; i < 10 && len(warm) < 2; i++ {
		d.waitWarm(t, 1)
		time.Sleep(500 * time.Millisecond)
		r, p := run()
		if strings.Join(p.Work, ",") != "outputs" || len(p.Tmp) != 0 || p.Env != nil || p.Module != nil || p.Global != nil || len(p.Procs) != 0 {
			t.Errorf("run %d (warm %v) saw traces of another run: %+v", i+1, r.Warm, p)
		}
		if r.Warm {
			warm = append(warm, r)
			probes = append(probes, p)
		}
	}
	if len(warm) < 2 {
		t.Fatalf("fewer than two of ten runs went warm")
	}
	r1, p1, p2 := warm[0], probes[0], probes[1]
	if !strings.Contains(r1.RuntimeVersion, "release-") {
		t.Errorf("result runtime_version %q does not name the pinned runsc", r1.RuntimeVersion)
	}
	if p1.Random == p2.Random {
		t.Errorf("two warm runs drew the same random number %v", p1.Random)
	}

	// A changed skill: its pool is drained, and the next run (warm or
	// cold) mounts the new version.
	old := d.warmContainers()
	script := filepath.Join(root, "prober", "scripts", "probe.py")
	if err := os.WriteFile(script, []byte(probePy+"print('version 2')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitfor.NoError(t, "the pool of the old version to drain", 2*time.Minute, func() error {
		ws := d.warmContainers()
		for _, id := range ws {
			if slices.Contains(old, id) {
				return fmt.Errorf("warm: %v", ws)
			}
		}
		return nil
	})
	// The session holds the old digest; loading again takes the new one.
	must[*api.LoadResult](t, "reload")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"prober"}}))
	r3, _ := run()
	if !strings.Contains(r3.Stdout, "version 2") {
		t.Errorf("the run after the change did not use the new version: %q", r3.Stdout)
	}

	// kill -9 with a job in flight and sandboxes waiting.
	d.waitWarm(t, 2)
	c2 := d.client()
	go func() {
		_, _ = c2.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"hang"}, TimeoutMS: 300000}, Path: "scripts/probe.py"})
	}()
	// The run's sandbox and two refilled ones.
	waitfor.NoError(t, "the hanging run to start", 2*time.Minute, func() error {
		if cs := d.containers(); len(cs) < 3 {
			return fmt.Errorf("containers %v", cs)
		}
		return nil
	})
	d.kill9()
	d.start()
	waitfor.NoError(t, "nothing running after the restart", 2*time.Minute, func() error {
		if cs, ps := d.containers(), hostProcs("skillbox-leak"); len(cs) > 0 || len(ps) > 0 {
			return fmt.Errorf("left running: containers %v, processes %v", cs, ps)
		}
		return nil
	})
}

// hostProcs lists host processes whose command line contains marker.
func hostProcs(marker string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(raw), marker) && !strings.Contains(string(raw), "go test") {
			out = append(out, e.Name())
		}
	}
	return out
}
