//go:build integration

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	rtcontainerd "github.com/skillbox/skillbox/runtime/containerd"
	"github.com/skillbox/skillbox/runtime/process"
	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
)

// useContainerd switches a daemon under test (not yet started) to the
// containerd at sock, with handler running binary ("" for the handler's
// default).
func (d *itDaemon) useContainerd(t *testing.T, sock, handler, binary string) {
	t.Helper()
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(cfg), "daemon {", "daemon {\n  runtime = \"containerd\"", 1)
	s += fmt.Sprintf("\nruntime \"containerd\" {\n  address = %q\n  handler = %q\n  state_dir = %q\n", sock, handler, filepath.Join(d.base, "containerd"))
	if binary != "" {
		s += fmt.Sprintf("  binary = %q\n", binary)
	}
	s += "}\n"
	if err := os.WriteFile(d.cfgPath, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	// runsc under the runc shim keeps its empty network namespace mounted
	// in the state dir; it goes before the daemon's dir is removed.
	t.Cleanup(func() {
		unmountNullNetns(filepath.Join(d.base, "containerd", "runc", rtcontainerd.DefaultNamespace))
	})
}

// ctrIDs lists the ids ctr lists of kind (tasks, containers) in skillbox's
// namespace; running only keeps tasks whose status is RUNNING.
func ctrIDs(t *testing.T, sock, kind string, running bool) []string {
	t.Helper()
	out, err := exec.Command("ctr", "--address", sock, "-n", rtcontainerd.DefaultNamespace, kind, "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr %s ls: %v\n%s", kind, err, out)
	}
	var ids []string
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) == 0 {
			continue // the header
		}
		if running && f[len(f)-1] != "RUNNING" {
			continue
		}
		ids = append(ids, f[0])
	}
	return ids
}

// activeSnapshots lists the snapshots in skillbox's namespace that are not
// committed image layers (a container's rootfs).
func activeSnapshots(t *testing.T, sock string) []string {
	t.Helper()
	out, err := exec.Command("ctr", "--address", sock, "-n", rtcontainerd.DefaultNamespace, "snapshots", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr snapshots ls: %v\n%s", err, out)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] != "Committed" {
			ids = append(ids, f[0])
		}
	}
	return ids
}

// shimsOf lists the pids of containerd shims serving container id.
func shimsOf(id string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv0, _, _ := bytes.Cut(raw, []byte{0})
		if strings.HasPrefix(filepath.Base(string(argv0)), "containerd-shim") && bytes.Contains(raw, []byte("\x00-id\x00"+id+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// watchdogsOf lists the sandbox watchdogs of id (pid: state).
func watchdogsOf(id string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.HasPrefix(raw, []byte(process.SandboxWatchdogArg0+"\x00"+id+"\x00")) {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		out = append(out, e.Name()+": "+string(st))
	}
	return out
}

// zombies lists the zombie processes on the host, pid -> command name.
func zombies() map[int]string {
	z := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 || i+2 >= len(raw) || raw[i+2] != 'Z' {
			continue
		}
		j := bytes.IndexByte(raw, '(')
		z[pid] = string(raw[j+1 : i])
	}
	return z
}

// Idle warm tasks of a containerd daemon once outlived a
// kill -9 of the daemon (still running 40 s later; only a daemon started
// again swept them). Now each sandbox's watchdog removes an idle one as
// soon as its daemon is gone: within seconds no task, container, active
// snapshot, shim, cgroup process or run dir of the pool is left, and no
// zombie, with no daemon started again.
func TestDaemonKill9EndsIdleContainerdTasks(t *testing.T) {
	needDaemon(t)
	runItNeed(t, "runsc")
	type variant struct{ name, handler, binary string }
	gvisor := variant{"gvisor", rtcontainerd.HandlerRunsc, ""}
	if !rtcontainerd.HasCapSysResource() {
		gvisor = variant{"gvisor", rtcontainerd.HandlerRuncV2, runtime.PinnedRunscPath()}
	}
	// One containerd for both: the first daemon's boot unpacks the image,
	// which takes minutes on a loaded machine.
	sock := startContainerd(t)
	for _, v := range []variant{gvisor, {"runc", rtcontainerd.HandlerRuncV2, "runc"}} {
		t.Run(v.name, func(t *testing.T) {
			if v.binary == "runc" && !haveBinary("runc") {
				runtimetest.SkipUnlessRequired(t, "runc is not installed")
			}
			d := newItDaemonPool(t, 2, extraSkill(t, "idler", "scripts/idle.py", "print('idle')\n"))
			d.useContainerd(t, sock, v.handler, v.binary)
			d.start()
			c := d.client()
			ctx := ctxT(t)
			sid := must[string](t, "sessions.create")(c.NewSession(ctx))
			must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"idler"}}))

			// The pool's sandboxes boot and wait, idle, for a job. The
			// first boot unpacks the image into containerd, in minutes
			// here; a boot that times out is retried (bootRetry).
			var warm []string
			waitfor.NoError(t, "2 warm tasks running", 10*time.Minute, func() error {
				warm = warm[:0]
				for _, id := range ctrIDs(t, sock, "tasks", true) {
					if strings.HasPrefix(id, "skillbox-warm-") {
						warm = append(warm, id)
					}
				}
				if len(warm) < 2 {
					return fmt.Errorf("%d warm tasks running (tasks %v)", len(warm), ctrIDs(t, sock, "tasks", false))
				}
				return nil
			})
			time.Sleep(2 * time.Second) // booted and waiting, not just started
			warm = ctrIDs(t, sock, "tasks", true)
			t.Logf("%s: idle warm tasks before the kill: %v", v.name, warm)
			zombiesBefore := zombies()

			d.kill9()
			killed := time.Now()

			// No daemon runs from here on.
			left := func() []string {
				var out []string
				if ids := ctrIDs(t, sock, "tasks", false); len(ids) > 0 {
					out = append(out, fmt.Sprintf("tasks %v", ids))
				}
				if ids := ctrIDs(t, sock, "containers", false); len(ids) > 0 {
					out = append(out, fmt.Sprintf("containers %v", ids))
				}
				if ids := activeSnapshots(t, sock); len(ids) > 0 {
					out = append(out, fmt.Sprintf("snapshots %v", ids))
				}
				for _, id := range warm {
					if p := shimsOf(id); len(p) > 0 {
						out = append(out, fmt.Sprintf("shim of %s %v", id, p))
					}
					if p := runCgroupProcs(id); len(p) > 0 {
						out = append(out, fmt.Sprintf("processes of %s %v", id, p))
					}
					if _, err := os.Lstat(filepath.Join(runtime.DefaultRunDir, id)); err == nil {
						out = append(out, "run dir of "+id)
					}
				}
				for pid, comm := range zombies() {
					// Other tests on the host make processes too; these are
					// the names a sandbox's processes go by.
					ours := strings.HasPrefix(comm, "containerd-shim") || strings.HasPrefix(comm, "runsc") || strings.HasPrefix(comm, "skillbox") ||
						slices.Contains([]string{"runc", "exe", "python3", "sh", "sleep"}, comm)
					if _, ok := zombiesBefore[pid]; !ok && ours {
						out = append(out, fmt.Sprintf("zombie %d (%s)", pid, comm))
					}
				}
				return out
			}
			// A few seconds: the watchdogs act at once; the bound is
			// generous for a busy two-core machine, far below the 40 s
			// the finding saw.
			bound := killed.Add(30 * time.Second)
			if !waitfor.Within(time.Until(bound), func() bool { return len(left()) == 0 }) {
				for _, id := range warm {
					log, _ := os.ReadFile(filepath.Join(runtime.DefaultRunDir, id, "watchdog.log"))
					t.Logf("%s: watchdog processes %v, log:\n%s", id, watchdogsOf(id), log)
				}
				t.Fatalf("%s: %s after the daemon was killed, left: %s", v.name, time.Since(killed).Round(time.Second), strings.Join(left(), "; "))
			}
			t.Logf("%s: pool gone %s after the daemon was killed", v.name, time.Since(killed).Round(100*time.Millisecond))
		})
	}
}
