//go:build integration

package runtime_test

// While a run is in flight, another local user must
// reach none of its files on the host. The run id is public (it is in the
// runtime CLI's --bundle, the shim's -id and the watchdog's arguments), so
// the probe below is given it, as an attacker reading `ps` would have it,
// and walks everything it can from there, as real other uids.

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	rtcontainerd "github.com/skillbox/skillbox/runtime/containerd"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

func init() {
	runtimetest.ProbeIfAsked()
}

// leakScript is the run: it writes the secret it has in its environment
// into its workdir and outputs, opens everything it owns to every user,
// says so and waits to be stopped.
const leakScript = `umask 000
printf '%s\n' "$RUN_SECRET" > /work/secret.txt
printf '%s\n' "$RUN_SECRET" > /work/outputs/out.txt
chmod 0777 /work /work/outputs
chmod 0666 /work/secret.txt /work/outputs/out.txt /work/input.txt
echo ready
exec sleep 120
`

const leakPython = `import os, subprocess, sys
sys.exit(subprocess.call(["/bin/sh", "/skill/scripts/leak.sh"]))
`

// containerdRunDirs are the directories containerd itself keeps for run
// id under the private daemon's root and state: their modes are
// containerd's (0700, or 0710 to the mapped root group in a user
// namespace, in 0711 parents), so a stat of the directory itself is
// allowed; nothing in it may be reached.
func containerdRunDirs(id string) []string {
	var out []string
	for _, d := range []string{"root", "state"} {
		out = append(out, filepath.Join(containerdDir(), d, "io.containerd.runtime.v2.task", rtcontainerd.DefaultNamespace, id))
	}
	return out
}

// liveRunIDs are the run ids in runDir, read as root: what an attacker
// gets from ps.
func liveRunIDs(t *testing.T, runDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(runDir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	if len(ids) == 0 {
		t.Fatalf("no live run dir in %s", runDir)
	}
	return ids
}

// TestRunFilesPrivate: a run on each backend, cold and warm (the pool's
// python and exec sandboxes), has an input holding a secret, writes a
// secret from its environment into its workdir and outputs, and opens
// /work and those files to everyone (chmod 0777/0666). While it runs, the
// probe, as uids 65534 and 65533, is given the run ids and walks the test
// state base (run dirs, the runtimes' state dirs, the private containerd's
// root and state), /run/skillbox, every process's root, cwd, descriptors
// and environment, and tries the run's paths directly: it must read no
// secret and reach nothing of a run but the stat of containerd's own
// bundle dirs.
func TestRunFilesPrivate(t *testing.T) {
	rootfs := testRootfs(t)
	probeBin := runtimetest.ProbeBinary(t)
	skill := makeSkill(t, map[string]string{"scripts/leak.sh": leakScript, "scripts/leak.py": leakPython})
	canarySecret := "CANARY-" + randomHex(12)
	canary := filepath.Join(filepath.Dir(probeBin), "canary")
	if err := os.WriteFile(canary, []byte(canarySecret), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range backends {
		for _, boot := range []string{"cold", "warm-python", "warm-exec"} {
			t.Run(name+"/"+boot, func(t *testing.T) {
				rt, opts := newBackend(t, name)
				inputSecret, envSecret := "INPUT-SECRET-"+randomHex(12), "ENV-SECRET-"+randomHex(12)
				args := []string{"/bin/sh", "/skill/scripts/leak.sh"}
				if boot == "warm-python" {
					args = []string{"python3", "/skill/scripts/leak.py"}
				}
				ready := make(chan struct{})
				job := runtime.Job{
					Sandbox:    runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: skill},
					Invocation: runtime.Invocation{Args: args, Env: []string{"RUN_SECRET=" + envSecret}, Files: []runtime.InputFile{{Name: "input.txt", Data: []byte(inputSecret + "\n"), Mode: 0o600}}, Stdout: closeOn(ready, "ready"), Limits: runtime.Limits{Timeout: 3 * time.Minute}},
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				type outcome struct {
					res *runtime.Result
					err error
				}
				done := make(chan outcome, 1)
				if boot == "cold" {
					go func() {
						res, err := rt.Run(ctx, job)
						done <- outcome{res, err}
					}()
				} else {
					lc := rt.(runtime.Lifecycle)
					pool := runtime.NewPool(lc, runtime.PoolConfig{PerKey: 1, Total: 1, IdleTimeout: time.Minute}, nil)
					defer func() {
						if err := pool.Close(context.Background()); err != nil {
							t.Error(err)
						}
					}()
					key := bootWarm(t, pool, job, "leak")
					go func() {
						res, err := pool.Run(ctx, key, job)
						done <- outcome{res, err}
					}()
				}
				select {
				case <-ready:
				case o := <-done:
					t.Fatalf("run ended before it was ready: %+v %v", o.res, o.err)
				case <-time.After(2 * time.Minute):
					t.Fatal("run not ready after 2 minutes")
				}

				ids := liveRunIDs(t, opts.RunDir)
				spec := runtimetest.ProbeSpec{
					Walk:    []string{testBase, runtime.DefaultStateBase},
					IDs:     ids,
					Names:   []string{"input.txt", "secret.txt", "outputs/out.txt", "config.json"},
					Secrets: []string{inputSecret, envSecret},
				}
				allowedStat := map[string]bool{}
				for _, id := range ids {
					dir := filepath.Join(opts.RunDir, id)
					for _, rel := range []string{"", "work", "work/input.txt", "work/secret.txt", "work/outputs", "work/outputs/out.txt",
						"config.json", "process.json", "hosts", "skills", "watchdog.log", "runsc.log", "runc.log", "fifo"} {
						spec.Paths = append(spec.Paths, filepath.Join(dir, rel))
					}
					spec.Paths = append(spec.Paths, filepath.Join(opts.Settings.String("state_dir"), id))
					if name == rtcontainerd.Name {
						for _, d := range containerdRunDirs(id) {
							allowedStat[d] = true
							for _, rel := range []string{"", "config.json", "rootfs", "rootfs/work/input.txt", "log", "init.pid"} {
								spec.Paths = append(spec.Paths, filepath.Join(d, rel))
							}
						}
					}
				}
				logModes(t, append(append([]string{opts.RunDir, opts.Settings.String("state_dir")}, spec.Paths...), containerdDir(),
					filepath.Join(containerdDir(), "state"), filepath.Join(containerdDir(), "root")))
				// The control: a file the probe can read, with a secret of
				// its own, which it must report.
				spec.Paths = append(spec.Paths, canary)
				spec.Secrets = append(spec.Secrets, canarySecret)
				for _, uid := range []uint32{65534, 65533} {
					sawCanary := false
					for _, h := range runtimetest.RunProbe(t, probeBin, uid, spec) {
						switch {
						case h.Path == canary:
							sawCanary = sawCanary || h.Secret
						case h.Secret || !(h.Op == "stat" && allowedStat[h.Path]):
							t.Errorf("uid %d reached %s %s (secret %v)", uid, h.Op, h.Path, h.Secret)
						}
					}
					if !sawCanary {
						t.Errorf("uid %d: the probe did not read its control file %s", uid, canary)
					}
				}
				cancel()
				select {
				case o := <-done:
					if o.err != nil {
						t.Fatal(o.err)
					}
					if o.res.Reason != runtime.ReasonKilled {
						t.Errorf("run ended %s (exit %d, stderr %q), want it killed", o.res.Reason, o.res.ExitCode, o.res.Stderr)
					}
				case <-time.After(time.Minute):
					t.Fatal("run not stopped a minute after its cancel")
				}
			})
		}
	}
}

// dirMode is the documented mode and owner of a path skillbox makes for a
// run (docs/SECURITY.md): owner "root" or "sandbox" (the container's
// nobody on the host), group likewise.
type dirMode struct {
	rel   string
	mode  os.FileMode
	owner string
}

// TestRunDirModes: every entry skillbox makes in a run dir while the run
// is in flight (before the script changes anything) has its documented
// mode and owner, and nothing else is there; RunDir itself is root's 0700.
func TestRunDirModes(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			lc := rt.(runtime.Lifecycle)
			ctx := context.Background()
			id := newID()
			spec := runtime.SandboxSpec{ID: id, RootFS: rootfs, Limits: runtime.Limits{Timeout: time.Minute}, Boot: runtime.BootExec}
			sb, err := lc.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(ctx)
			if err := sb.Start(ctx); err != nil {
				t.Fatal(err)
			}
			ready := make(chan struct{})
			inv := runtime.Invocation{Args: []string{"/bin/sh", "-c", "echo ready; exec sleep 60"}, Limits: spec.Limits,
				Files:  []runtime.InputFile{{Name: "in.txt", Data: []byte("x"), Mode: 0o600}},
				Stdout: closeOn(ready, "ready")}
			if err := sb.Deliver(ctx, inv); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ready:
			case <-time.After(time.Minute):
				t.Fatal("not ready")
			}
			sandboxUID := 65534
			if kernelOf(name) == "runc" { // the tests keep runc's user namespace on
				sandboxUID = oci.DefaultUserNSBase + 65534
			}
			want := []dirMode{
				{"", oci.RunDirMode | os.ModeDir, "root"},
				{"work", 0o700 | os.ModeDir, "sandbox"},
				{"work/outputs", 0o755 | os.ModeDir, "sandbox"},
				{"work/in.txt", 0o600, "sandbox"},
				{"hosts", 0o644, "root"},
				{"config.json", 0o600, "root"},
				{"process.json", 0o600, "root"},
				{"watchdog.log", 0o600, "root"},
			}
			switch name {
			case "runsc":
				want = append(want, dirMode{"runsc.log", 0o644, "root"})
			case "runc":
				want = append(want, dirMode{"runc.log", 0o644, "root"})
			case rtcontainerd.Name:
				want = append(want, dirMode{"fifo", 0o700 | os.ModeDir, "root"})
			}
			got := map[string]os.FileInfo{}
			dir := filepath.Join(opts.RunDir, id)
			_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				if rel == "." {
					rel = ""
				}
				if strings.HasPrefix(rel, "fifo/") {
					return nil // containerd's FIFOs, in the 0700 fifo dir
				}
				info, err := os.Lstat(p)
				if err == nil {
					got[rel] = info
				}
				return nil
			})
			for _, w := range want {
				info, ok := got[w.rel]
				delete(got, w.rel)
				if !ok {
					if w.rel == "process.json" && name == rtcontainerd.Name {
						continue // containerd execs from the spec in memory
					}
					t.Errorf("%s: missing", filepath.Join(dir, w.rel))
					continue
				}
				st := info.Sys().(*syscall.Stat_t)
				uid := 0
				if w.owner == "sandbox" {
					uid = sandboxUID
				}
				if info.Mode() != w.mode || int(st.Uid) != uid || int(st.Gid) != uid {
					t.Errorf("%s: %v %d:%d, want %v %d:%d", filepath.Join(dir, w.rel), info.Mode(), st.Uid, st.Gid, w.mode, uid, uid)
				}
			}
			for rel, info := range got {
				t.Errorf("%s: %v, not documented", filepath.Join(dir, rel), info.Mode())
			}
			for p, want := range map[string]os.FileMode{opts.RunDir: oci.RunDirMode} {
				var st unix.Stat_t
				if err := unix.Lstat(p, &st); err != nil {
					t.Error(err)
				} else if os.FileMode(st.Mode&0o7777) != want || st.Uid != 0 {
					t.Errorf("%s: %o uid %d, want %o root's", p, st.Mode&0o7777, st.Uid, want)
				}
			}
			// The state dir holds the runtime's copy of the spec: no other
			// user may list it or get into it.
			var st unix.Stat_t
			if err := unix.Lstat(opts.Settings.String("state_dir"), &st); err != nil {
				t.Error(err)
			} else if os.FileMode(st.Mode&0o7777) != oci.RunDirMode || st.Uid != 0 {
				t.Errorf("state dir %s: %o uid %d, want %o root's", opts.Settings.String("state_dir"), st.Mode&0o7777, st.Uid, oci.RunDirMode)
			}
			if err := sb.Destroy(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// logModes logs the mode and owner of each path that exists (-v): what
// docs/SECURITY.md's table of modes is checked against.
func logModes(t *testing.T, paths []string) {
	t.Helper()
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			t.Logf("mode %04o %d:%d %s", st.Mode&0o7777, st.Uid, st.Gid, p)
		}
	}
}
