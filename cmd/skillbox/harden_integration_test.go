//go:build integration

package main

// Hardening tests of a real `skillbox serve` (issue 14): what must hold
// when the daemon dies, and when one uid floods it.

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/audit"
)

// useRuntime switches a daemon under test (not yet started) to the named
// runtime, with a state dir of its own.
func (d *itDaemon) useRuntime(t *testing.T, name string) {
	t.Helper()
	if name == "runsc" {
		return
	}
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(cfg), "daemon {", "daemon {\n  runtime = \""+name+"\"", 1)
	s += "\nruntime \"" + name + "\" { state_dir = \"" + filepath.Join(d.base, name) + "\" }\n"
	if err := os.WriteFile(d.cfgPath, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runCgroupProcs lists the host processes in run job's cgroup, in every
// hierarchy.
func runCgroupProcs(job string) []int {
	var pids []int
	seen := map[int]bool{}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/skillbox/" + job)
	dirs = append(dirs, "/sys/fs/cgroup/skillbox/"+job)
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
			if err != nil || !de.IsDir() {
				return nil
			}
			raw, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(raw)) {
				if n, err := strconv.Atoi(f); err == nil && !seen[n] {
					seen[n] = true
					pids = append(pids, n)
				}
			}
			return nil
		})
	}
	return pids
}

// Finding 6: kill -9 of the daemon in the middle of a run does not let
// the run outlive its time limit, though no daemon is started again: the
// run's watchdog kills it at the deadline. (Before the watchdog, the
// container went on for the script's whole 600 s.)
func TestDaemonKill9KeepsDeadline(t *testing.T) {
	needDaemon(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			if rt == "runc" && !haveBinary("runc") {
				t.Skip("runc is not installed")
			}
			extra := extraSkill(t, "sleeper", "scripts/sleep.sh", "echo sleeping\nsleep 600\n")
			d := newItDaemon(t, extra)
			d.useRuntime(t, rt)
			d.start()
			c := d.client()
			ctx := ctxT(t)
			sid := must[string](t, "sessions.create")(c.CreateSession(ctx))
			must[*api.LoadResult](t, "load")(c.Load(ctx, api.LoadParams{SessionID: sid, Names: []string{"sleeper"}}))

			const limit = 5 * time.Second
			runErr := make(chan error, 1)
			go func() {
				_, err := c.RunScript(ctx, api.RunScriptParams{SessionID: sid, Path: "scripts/sleep.sh", TimeoutMS: limit.Milliseconds()})
				runErr <- err
			}()
			// Wait until the run is audited and its processes are in its
			// cgroup.
			var job string
			deadline := time.Now().Add(3 * time.Minute)
			for job == "" || len(runCgroupProcs(job)) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the run did not start within 3 minutes (job %q)", job)
				}
				select {
				case err := <-runErr:
					t.Fatalf("the run ended early: %v", err)
				default:
				}
				audit.Read(d.auditDir, func(r *audit.Record) error {
					if r.Event == audit.EventRunStart && r.SessionID == sid {
						job = "skillbox-" + strings.TrimPrefix(r.Run.RunID, "run_")
					}
					return nil
				})
				time.Sleep(100 * time.Millisecond)
			}
			d.kill9()
			killed := time.Now()
			<-runErr

			// No daemon runs now. The run's processes must be gone once
			// its limit (plus grace) is over; the bound here is generous
			// for a busy machine, and far below the script's 600 s.
			bound := killed.Add(limit + time.Minute)
			for left := runCgroupProcs(job); len(left) > 0; left = runCgroupProcs(job) {
				if time.Now().After(bound) {
					t.Fatalf("%s: run %s still has processes %v in its cgroup %s after the daemon was killed, past its %s limit",
						rt, job, left, time.Since(killed).Round(time.Second), limit)
				}
				time.Sleep(250 * time.Millisecond)
			}

			// A daemon started again sweeps what is left (container
			// state, run dir, cgroup) and works.
			d.start()
			c2 := d.client()
			if _, err := c2.Instructions(ctx, sid); err != nil {
				t.Errorf("instructions after the restart: %v", err)
			}
		})
	}
}
