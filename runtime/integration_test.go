//go:build integration

package runtime_test

// Integration tests: real runsc and runc containers, the same table against
// both. They need root, the runtime binaries and a rootfs with python3, bash,
// coreutils and node: $SKILLBOX_TEST_ROOTFS, or one built once by
// hack/test-rootfs.sh into /var/cache/skillbox/test-rootfs. Run them with
//
//	go test -tags integration ./runtime/ -v
//
// No assertion depends on timing beyond generous timeouts: the machine this
// runs on may have two busy cores.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/oci"
	_ "github.com/skillbox/skillbox/runtime/ocicli"
	"github.com/skillbox/skillbox/runtime/rootless" // registers the runsc and runc backends
	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

const (
	defaultRootfsCache = "/var/cache/skillbox/test-rootfs"
	defaultTestBase    = "/run/skillbox-test"
)

// testBase holds the runtimes' state and run dirs of these tests;
// SKILLBOX_TEST_STATE moves it so two checkouts can run the suite at once
// without taking each other's containers for leftovers.
var testBase = func() string {
	if p := os.Getenv("SKILLBOX_TEST_STATE"); p != "" {
		return p
	}
	return defaultTestBase
}()

var backends = []string{"runsc", "runc", "containerd"}

var (
	rootfsOnce sync.Once
	rootfsPath string
	rootfsErr  error
)

// testRootfs returns the rootfs the tests run in, building it once.
func testRootfs(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		runtimetest.SkipUnlessRequired(t, "needs root and runsc/runc: run via make test as root")
	}
	rootfsOnce.Do(func() {
		if p := os.Getenv("SKILLBOX_TEST_ROOTFS"); p != "" {
			rootfsPath = p
			return
		}
		rootfsPath = defaultRootfsCache
		// The script returns at once when the cached rootfs is of its
		// current recipe, and rebuilds one made by an older recipe.
		script, _ := filepath.Abs("../hack/test-rootfs.sh")
		out, err := exec.Command(script, rootfsPath).CombinedOutput()
		if err != nil {
			rootfsErr = fmt.Errorf("building the test rootfs with %s failed: %v\n%s", script, err, out)
		}
	})
	if rootfsErr != nil {
		t.Fatal(rootfsErr)
	}
	for _, bin := range []string{"usr/bin/python3", "bin/bash", "usr/bin/node"} {
		if _, err := os.Stat(filepath.Join(rootfsPath, bin)); err != nil {
			t.Fatalf("test rootfs %s lacks %s (set SKILLBOX_TEST_ROOTFS to a rootfs with python3, bash, node): %v", rootfsPath, bin, err)
		}
	}
	return rootfsPath
}

// binaryOf is the CLI of a backend as these tests run it: runsc is the
// pinned build (hack/install-runsc.sh) unless SKILLBOX_TEST_RUNSC names
// another.
func binaryOf(name string) string {
	if name != "runsc" {
		return name
	}
	if p := os.Getenv("SKILLBOX_TEST_RUNSC"); p != "" {
		return p
	}
	return runtime.PinnedRunscPath()
}

// needBackend skips, loudly, when the test cannot run here.
func needBackend(t testing.TB, name string) {
	t.Helper()
	if os.Geteuid() != 0 {
		runtimetest.SkipUnlessRequired(t, "needs root and runsc/runc: run via make test as root")
	}
	if _, err := exec.LookPath(binaryOf(name)); err != nil {
		runtimetest.SkipUnlessRequired(t, "needs root and runsc/runc: run via make test as root (%s not found: %v)", name, err)
	}
	if name == "containerd" {
		containerdAddress(t)
	}
}

// newBackend makes a backend with its own state and run dirs.
// baseOptions are a backend's state and run dirs under testBase.
func baseOptions(name string) runtime.Options {
	return runtime.Options{
		Settings: runtime.Settings{"binary": runtimeBinary(name), "state_dir": filepath.Join(testBase, name, "state")},
		RunDir:   filepath.Join(testBase, name, "runs"),
	}
}

func newBackend(t testing.TB, name string) (runtime.Runtime, runtime.Options) {
	t.Helper()
	needBackend(t, name)
	opts := baseOptions(name)
	// KillGrace is generous, so that a script handling TERM gets to run its
	// handler on a loaded machine; the sequence is the same as with the
	// default second.
	opts.KillGrace, opts.Logger = 5*time.Second, hclog.New(&hclog.LoggerOptions{
		Name:   "test",
		Level:  hclog.LevelFromString(os.Getenv("SKILLBOX_TEST_LOG")),
		Output: os.Stderr,
	})
	withContainerd(t, name, &opts)
	opts.Rootless = rootless.Active() // TestRunRootless's user namespace
	rt, err := runtime.New(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rt, opts
}

// The table's helpers, by the names the tests of this package use.
var (
	randomHex     = runtimetest.RandomHex
	makeSkill     = runtimetest.MakeSkill
	newHostSecret = runtimetest.NewHostSecret
	runWarm       = runtimetest.RunWarm
	wantExit      = runtimetest.WantExit
	noSecret      = runtimetest.NoSecret
	clip          = runtimetest.Clip
	hostProcsWith = runtimetest.HostProcsWith
)

const hostEnvName = runtimetest.HostEnvName

var idSeq struct {
	sync.Mutex
	n   int
	tag string
}

// testIDPrefix starts the ids of this test process's runs: other test
// processes (other packages, other checkouts) may run at the same time,
// and their leftovers are not ours to report.
func testIDPrefix() string {
	idSeq.Lock()
	defer idSeq.Unlock()
	if idSeq.tag == "" {
		idSeq.tag = randomHex(2)
	}
	return runtime.IDPrefix + "test" + idSeq.tag + "-"
}

func newID() string {
	prefix := testIDPrefix()
	idSeq.Lock()
	defer idSeq.Unlock()
	idSeq.n++
	return fmt.Sprintf("%s%d-%s", prefix, idSeq.n, randomHex(3))
}

// bootWarm has pool boot a sandbox for job (of the named skill) and waits
// up to 2 minutes until it is idle; it returns the job's key.
func bootWarm(t *testing.T, pool *runtime.Pool, job runtime.Job, skill string) runtime.PoolKey {
	t.Helper()
	key, ok := runtime.KeyFor(job, skill, "sha256:test")
	if !ok {
		t.Fatal("job cannot run warm")
	}
	pool.Warm(key)
	waitfor.Within(2*time.Minute, func() bool { return pool.Stats().Idle > 0 })
	if st := pool.Stats(); st.Idle == 0 {
		t.Fatalf("no sandbox booted: %+v", st)
	}
	return key
}

// TestRun runs every case cold and warm: warm, the sandbox is booted
// first (python scripts in the supervisor, anything else exec'd into a
// holder) and only then given the job, which must behave the same.
func TestRun(t *testing.T) {
	rootfs := testRootfs(t)
	secret := newHostSecret(t)
	envVal := "ENVSECRET-" + randomHex(10)
	t.Setenv(hostEnvName, envVal)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			runCases(t, name, rootfs, secret, envVal)
		})
	}
}

// runCases runs the case table on backend name, cold and warm.
func runCases(t *testing.T, name, rootfs string, secret runtimetest.HostSecret, envVal string) {
	rt, opts := newBackend(t, name)
	runtimetest.Table{
		Runtime: rt,
		Env:     runtimetest.CaseEnv{Backend: name, Kernel: kernelOf(name), Secret: secret, EnvVal: envVal, Rootless: opts.Rootless},
		RootFS:  rootfs,
		NewID:   newID,
		After:   func(t *testing.T, job runtime.Job) { assertClean(t, name, opts, job.Sandbox.ID) },
	}.Run(t, runtimetest.Cold, runtimetest.Warm)
}

// assertClean checks that a run left nothing: no container in our state dir,
// no mount under the run dir, no run dir, no cgroup.
func assertClean(t *testing.T, backend string, opts runtime.Options, id string) {
	t.Helper()
	out, err := listContainers(backend, opts)
	if err != nil {
		t.Errorf("%s list: %v %s", backend, err, out)
	} else if strings.TrimSpace(out) != "" {
		t.Errorf("containers left in %s: %s", opts.Settings.String("state_dir"), out)
	}
	assertContainerdClean(t, backend, opts)
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], opts.RunDir+"/") {
			t.Errorf("mount left: %s", line)
		}
	}
	if ents, _ := os.ReadDir(opts.RunDir); len(ents) > 0 {
		t.Errorf("run dirs left in %s: %v", opts.RunDir, ents)
	}
	// With no id: no cgroup of any test run may be left.
	for _, ctrl := range []string{"memory", "pids", "cpu", "unified"} {
		parent := filepath.Join("/sys/fs/cgroup", ctrl, oci.CgroupParent)
		kids, _ := os.ReadDir(parent)
		for _, k := range kids {
			if k.IsDir() && (k.Name() == id || id == "" && strings.HasPrefix(k.Name(), testIDPrefix())) {
				t.Errorf("cgroup left: %s", filepath.Join(parent, k.Name()))
			}
		}
	}
}

func TestInvalidJobStartsNothing(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			dir := makeSkill(t, nil)
			for _, env := range [][]string{{"LD_PRELOAD=/work/x.so"}, {"PYTHONPATH=/work"}, {"BAD NAME=1"}} {
				job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: dir}, Invocation: runtime.Invocation{Args: []string{"true"}, Env: env}}
				_, err := rt.Run(context.Background(), job)
				if !errors.Is(err, runtime.ErrInvalidJob) {
					t.Errorf("env %v: err %v, want ErrInvalidJob", env, err)
				}
				assertClean(t, name, opts, job.Sandbox.ID)
			}
			// Input names that would leave the workdir, or that are not
			// printable, are refused before anything is made.
			for _, files := range [][]runtime.InputFile{
				{{Name: "../escape.txt", Data: []byte("x")}},
				{{Name: "a/../../escape.txt", Data: []byte("x")}},
				{{Name: "/etc/cron.d/evil", Data: []byte("x")}},
				{{Name: "evil\x1b[31m.txt", Data: []byte("x")}},
				{{Name: "evil\nname", Data: []byte("x")}},
				{{Name: "nul\x00.txt", Data: []byte("x")}},
				{{Name: "l", Kind: runtime.InputSymlink, Target: "/etc"}, {Name: "l/cron.d/evil", Data: []byte("x")}},
			} {
				job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: dir}, Invocation: runtime.Invocation{Args: []string{"true"}, Files: files}}
				_, err := rt.Run(context.Background(), job)
				if !errors.Is(err, runtime.ErrInvalidJob) {
					t.Errorf("files %q: err %v, want ErrInvalidJob", files[len(files)-1].Name, err)
				}
				assertClean(t, name, opts, job.Sandbox.ID)
			}
			// An image without the /etc/hosts mount point is refused, not
			// run with localhost unresolvable.
			bare := t.TempDir()
			job0 := runtime.Job{Sandbox: runtime.SandboxSpec{ID: newID(), RootFS: bare, SkillDir: dir}, Invocation: runtime.Invocation{Args: []string{"true"}}}
			if _, err := rt.Run(context.Background(), job0); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "/etc/hosts") {
				t.Errorf("rootfs without /etc/hosts: err %v, want ErrUnavailable naming /etc/hosts", err)
			}
			assertClean(t, name, opts, job0.Sandbox.ID)
			// Network without a configured namespace is refused, not faked.
			job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: dir, Network: true}, Invocation: runtime.Invocation{Args: []string{"true"}}}
			if _, err := rt.Run(context.Background(), job); !errors.Is(err, runtime.ErrUnavailable) {
				t.Errorf("network without netns: err %v, want ErrUnavailable", err)
			}
			assertClean(t, name, opts, job.Sandbox.ID)
		})
	}
}

func TestCancelKills(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			marker := "skillbox-marker-" + randomHex(8)
			dir := makeSkill(t, map[string]string{"scripts/sleep.py": "import sys, time\nprint('up', flush=True)\ntime.sleep(1000)\n"})
			ctx, cancel := context.WithCancel(context.Background())
			job := runtime.Job{
				Sandbox: runtime.SandboxSpec{
					ID:       newID(),
					RootFS:   rootfs,
					SkillDir: dir,
				},
				Invocation: runtime.Invocation{
					Args: []string{"python3", "/skill/scripts/sleep.py", marker},
					Stdout: sinkFunc(func(p []byte) {
						if bytes.Contains(p, []byte("up")) {
							cancel()
						}
					}),
				},
			}
			res, err := rt.Run(ctx, job)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if res.Reason != runtime.ReasonKilled || res.Signal != "SIGKILL" {
				t.Errorf("reason %s signal %q, want killed by SIGKILL", res.Reason, res.Signal)
			}
			if left := hostProcsWith(marker); len(left) > 0 {
				t.Errorf("processes left: %v", left)
			}
			assertClean(t, name, opts, job.Sandbox.ID)
		})
	}
}

type sinkFunc func(p []byte)

func (f sinkFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// closeOn is a sink that closes ch the first time what it is given holds
// word.
func closeOn(ch chan struct{}, word string) sinkFunc {
	var done bool
	return func(p []byte) {
		if !done && bytes.Contains(p, []byte(word)) {
			done = true
			close(ch)
		}
	}
}

// TestOutputFloodMemoryBounded checks that a flood costs us no more than the
// cap: the Go heap after the run stays near where it was.
func TestOutputFloodMemoryBounded(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			dir := makeSkill(t, map[string]string{"scripts/flood.sh": "head -c 300000000 /dev/zero; sleep 100\n"})
			var before, after goruntime.MemStats
			goruntime.GC()
			goruntime.ReadMemStats(&before)
			job := runtime.Job{
				Sandbox:    runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: dir},
				Invocation: runtime.Invocation{Args: []string{"bash", "/skill/scripts/flood.sh"}, Limits: runtime.Limits{StdoutBytes: 1 << 20, Timeout: 120 * time.Second}},
			}
			res, err := rt.Run(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			goruntime.ReadMemStats(&after)
			if res.Reason != runtime.ReasonOutputCap || len(res.Stdout) != 1<<20 {
				t.Errorf("reason %s len %d", res.Reason, len(res.Stdout))
			}
			// TotalAlloc counts every byte ever allocated during the run; a
			// reader that buffered the flood would show hundreds of MiB.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
				t.Errorf("allocated %d MiB while draining a capped flood", grew>>20)
			}
			assertClean(t, name, opts, job.Sandbox.ID)
		})
	}
}

// TestConcurrentRuns runs a few jobs at once on each backend: every run gets
// its own output, inputs and exit code back.
func TestConcurrentRuns(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			dir := makeSkill(t, map[string]string{"scripts/echo.py": "import sys\nprint(open('in.txt').read() + sys.argv[1])\nsys.exit(int(sys.argv[1]))\n"})
			const n = 4
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					job := runtime.Job{
						Sandbox:    runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: dir},
						Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/echo.py", fmt.Sprint(i)}, Files: []runtime.InputFile{{Name: "in.txt", Data: []byte(fmt.Sprintf("run-%d:", i))}}},
					}
					res, err := rt.Run(context.Background(), job)
					if err != nil {
						errs <- err
						return
					}
					if want := fmt.Sprintf("run-%d:%d\n", i, i); string(res.Stdout) != want || res.ExitCode != i {
						errs <- fmt.Errorf("run %d: stdout %q exit %d, want %q exit %d", i, res.Stdout, res.ExitCode, want, i)
					}
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			assertClean(t, name, opts, "")
		})
	}
}

// crashEnv makes the test binary act as a process that dies (SIGKILL) in
// the middle of a run, leaving its container, run dir, mount and cgroup. In
// mode "up" it kills itself once the script has printed "up"; in mode
// "early" it prints "running" as it starts the run and waits for the test
// to kill it; in mode "warm-idle" it boots a python sandbox and dies with
// it waiting for a job.
const crashEnv = "SKILLBOX_TEST_CRASH_HELPER"

// crashCommand is the test binary acting as the crash helper: a run of
// job id in backend name (rootfs, skill dir, marker argument, mode, and
// the mode's own fields after them).
func crashCommand(name string, opts runtime.Options, id, rootfs, skill, marker, mode string, more ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	fields := append([]string{name, opts.Settings.String("state_dir"), opts.RunDir, id, rootfs, skill, marker, mode}, more...)
	cmd.Env = append(os.Environ(), crashEnv+"="+strings.Join(fields, "|"))
	return cmd
}

// crashMidRun runs the crash helper to its crash; the test fails if the
// run ended any other way.
func crashMidRun(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "crashing now") {
		t.Fatalf("crash helper: %v\n%s", err, out)
	}
}

func TestMain(m *testing.M) {
	enterRootlessChild()
	if spec := os.Getenv(crashEnv); spec != "" {
		crashHelper(spec)
		os.Exit(3) // not reached: the helper kills itself
	}
	release := clearLeftovers()
	code := m.Run()
	stopContainerd()
	release()
	os.Exit(code)
}

// ownsTestBase is true in the test process that holds testBase's lock (not in
// a helper it re-executes): only it clears what earlier processes left.
var ownsTestBase bool

// clearLeftovers removes what killed test processes of this checkout left in
// testBase's runc and runsc state dirs (a CLI killed while creating leaves a
// state dir that makes every later list fail), so that one crashed run does
// not fail every later run's leftover check. It only acts while it holds
// testBase's lock: a test process that re-executes this binary as a helper
// finds the lock taken and leaves the parent's containers alone.
func clearLeftovers() (release func()) {
	if err := os.MkdirAll(testBase, 0o700); err != nil {
		return func() {}
	}
	lock, err := os.OpenFile(filepath.Join(testBase, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return func() {}
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return func() {}
	}
	ownsTestBase = true
	for _, name := range []string{"runsc", "runc"} {
		for _, dir := range []string{name, name + "-other"} {
			state := filepath.Join(testBase, dir, "state")
			ents, _ := os.ReadDir(state)
			for _, e := range ents {
				if !e.IsDir() || !strings.HasPrefix(e.Name(), runtime.IDPrefix) {
					continue
				}
				out, err := exec.Command(binaryOf(name), "--root", state, "delete", "--force", e.Name()).CombinedOutput()
				fmt.Fprintf(os.Stderr, "removed a container left by an earlier test process: %s/%s (%v %s)\n", state, e.Name(), err, bytes.TrimSpace(out))
			}
		}
	}
	return func() { lock.Close() }
}

func crashHelper(spec string) {
	f := strings.Split(spec, "|")
	backend, stateDir, runDir, id, rootfs, skill, marker, mode := f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]
	opts := runtime.Options{Settings: runtime.Settings{"binary": runtimeBinary(backend), "state_dir": stateDir}, RunDir: runDir}
	withContainerd(nil, backend, &opts)
	rt, err := runtime.New(backend, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	job := runtime.Job{
		Sandbox: runtime.SandboxSpec{
			ID:       id,
			RootFS:   rootfs,
			SkillDir: skill,
		},
		Invocation: runtime.Invocation{
			Args: []string{"python3", "/skill/scripts/sleep.py", marker},
			Stdout: sinkFunc(func(p []byte) {
				if mode == "up" && bytes.Contains(p, []byte("up")) {
					fmt.Println("crashing now")
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
			}),
			Limits: runtime.Limits{Timeout: 10 * time.Minute},
		},
	}
	if mode == "egress-up" {
		job.Sandbox.Egress, mode = &egress.Config{}, "up"
	}
	if mode == "image-up" {
		// A sandbox on a snapshot of a store image (containerd): its
		// name, digest and layout follow.
		job.Sandbox.Image = runtime.ImageRef{Name: f[8], Digest: f[9], Layout: f[10]}
		job.Sandbox.SkillDir, job.Invocation.Args, mode = "", []string{"/bin/sh", "-c", "echo up; exec sleep 1000", marker}, "up"
	}
	if mode == "early" {
		fmt.Println("running")
	}
	if mode == "warm-idle" {
		// A pooled sandbox, booted and waiting for a job, when its
		// process dies.
		ctx := context.Background()
		sb, err := rt.(runtime.Lifecycle).Create(ctx, runtime.SandboxSpec{ID: id, RootFS: rootfs, SkillDir: skill, Limits: job.Sandbox.Limits, Boot: runtime.BootPython})
		if err == nil {
			err = sb.Start(ctx)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "warm sandbox:", err)
			os.Exit(2)
		}
		fmt.Println("crashing now")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	_, err = rt.Run(context.Background(), job)
	fmt.Fprintln(os.Stderr, "run ended without the crash:", err)
	os.Exit(2)
}

// TestSweep crashes a helper process mid-run and checks that Sweep removes
// the container it left running, its run dir, workdir mount and cgroup.
func TestSweep(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			dir := makeSkill(t, map[string]string{"scripts/sleep.py": "import time\nprint('up', flush=True)\ntime.sleep(1000)\n"})
			id := newID()
			marker := "skillbox-marker-" + randomHex(8)
			crashMidRun(t, crashCommand(name, opts, id, rootfs, dir, marker, "up"))
			list, _ := listContainers(name, opts)
			if !strings.Contains(list, id) {
				t.Fatalf("the crash left no container %s: %q", id, list)
			}
			// A run in progress here must survive the sweep.
			up := make(chan struct{})
			var once sync.Once
			liveJob := runtime.Job{
				Sandbox: runtime.SandboxSpec{
					ID:       newID(),
					RootFS:   rootfs,
					SkillDir: dir,
				},
				Invocation: runtime.Invocation{
					Args: []string{"python3", "-c", "import time; print('up', flush=True); time.sleep(3); print('done')"},
					Stdout: sinkFunc(func(p []byte) {
						if bytes.Contains(p, []byte("up")) {
							once.Do(func() { close(up) })
						}
					}),
				},
			}
			type outcome struct {
				res *runtime.Result
				err error
			}
			liveDone := make(chan outcome, 1)
			go func() {
				res, err := rt.Run(context.Background(), liveJob)
				liveDone <- outcome{res, err}
			}()
			select {
			case <-up:
			case o := <-liveDone:
				t.Fatalf("live run ended early: %v %+v", o.err, o.res)
			}
			if err := runtime.Sweep(context.Background(), rt); err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			o := <-liveDone
			if o.err != nil || o.res.Reason != runtime.ReasonExit || string(o.res.Stdout) != "up\ndone\n" {
				t.Errorf("the live run was disturbed by Sweep: %v %+v", o.err, o.res)
			}
			assertClean(t, name, opts, id)
			waitfor.Within(10*time.Second, func() bool { return len(hostProcsWith(marker)) == 0 })
			if left := hostProcsWith(marker); len(left) > 0 {
				t.Errorf("processes left after Sweep: %v", left)
			}
		})
	}
}

// TestSweepContainerWithoutRunDir: a container whose run dir is gone (as
// when a run's teardown fails to delete it and removes the run dir anyway;
// here the test removes the run dir of a crashed run) is removed by Sweep,
// because its bundle was a run dir of this RunDir, and so is its cgroup
// once nothing runs in it.
func TestSweepContainerWithoutRunDir(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			dir := makeSkill(t, map[string]string{"scripts/sleep.py": "import time\nprint('up', flush=True)\ntime.sleep(1000)\n"})
			id := newID()
			marker := "skillbox-marker-" + randomHex(8)
			crashMidRun(t, crashCommand(name, opts, id, rootfs, dir, marker, "up"))
			runDir := filepath.Join(opts.RunDir, id)
			if err := syscall.Unmount(filepath.Join(runDir, "work"), syscall.MNT_DETACH); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(runDir); err != nil {
				t.Fatal(err)
			}
			list, _ := listContainers(name, opts)
			if !strings.Contains(list, id) {
				t.Fatalf("the crash left no container %s: %q", id, list)
			}
			if err := runtime.Sweep(context.Background(), rt); err != nil {
				t.Errorf("Sweep: %v", err)
			}
			assertClean(t, name, opts, id)
			waitfor.Within(30*time.Second, func() bool { return len(hostProcsWith(marker)) == 0 })
			if left := hostProcsWith(marker); len(left) > 0 {
				t.Errorf("processes left after Sweep: %v", left)
			}
		})
	}
}

// youngCrashDelays are how long after the helper starts its run it is
// killed: by default around when the bundle is made and the runtime CLI is
// creating the container, the window a fixed "too young to sweep" age used
// to cover (what the crash leaves varies with the machine's speed; each
// delay is logged with it). Override with SKILLBOX_TEST_CRASH_DELAYS
// (comma-separated durations) to probe others.
func youngCrashDelays(t *testing.T) []time.Duration {
	env := os.Getenv("SKILLBOX_TEST_CRASH_DELAYS")
	if env == "" {
		return []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}
	}
	var ds []time.Duration
	for _, f := range strings.Split(env, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("SKILLBOX_TEST_CRASH_DELAYS: %v", err)
		}
		ds = append(ds, d)
	}
	return ds
}

// TestSweepYoungCrash kills -9 a helper process a moment after it started a
// run (its run dir only just made, its container being created) and sweeps
// at once, as a daemon restarted right after a crash does: nothing of the
// run may be left, however young it was.
func TestSweepYoungCrash(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			dir := makeSkill(t, map[string]string{"scripts/sleep.py": "import time\nprint('up', flush=True)\ntime.sleep(1000)\n"})
			for _, delay := range youngCrashDelays(t) {
				t.Run(delay.String(), func(t *testing.T) {
					id := newID()
					marker := "skillbox-marker-" + randomHex(8)
					cmd := crashCommand(name, opts, id, rootfs, dir, marker, "early")
					cmd.Stderr = os.Stderr
					cmd.WaitDelay = 10 * time.Second
					stdout, err := cmd.StdoutPipe()
					if err != nil {
						t.Fatal(err)
					}
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					line, err := bufio.NewReader(stdout).ReadString('\n')
					if line != "running\n" {
						cmd.Process.Kill()
						cmd.Wait()
						t.Fatalf("crash helper did not start its run: %q %v", line, err)
					}
					time.Sleep(delay)
					if err := cmd.Process.Kill(); err != nil {
						t.Fatal(err)
					}
					_ = cmd.Wait()
					// What the crash left, for the log: it varies with timing.
					list, _ := listContainers(name, opts)
					_, dirErr := os.Stat(filepath.Join(opts.RunDir, id))
					_, cgErr := os.Stat(filepath.Join("/sys/fs/cgroup/memory", oci.CgroupParent, id))
					t.Logf("killed %v after the run started; left: containers %q, run dir %v, memory cgroup %v",
						delay, strings.Fields(string(list)), dirErr == nil, cgErr == nil)

					if err := runtime.Sweep(context.Background(), rt); err != nil {
						t.Errorf("Sweep: %v", err)
					}
					assertClean(t, name, opts, id)
					// The killed processes may take init a moment to reap.
					waitfor.Within(30*time.Second, func() bool { return len(hostProcsWith(id))+len(hostProcsWith(marker)) == 0 })
					if left := append(hostProcsWith(id), hostProcsWith(marker)...); len(left) > 0 {
						t.Errorf("processes left after Sweep: %v", left)
					}
				})
			}
		})
	}
}

// TestSweepSparesOtherRunDir sweeps one runtime instance (its own state and
// run dir) while another instance of the same backend has a run in
// progress and a run just made, its cgroup still empty: the sweep must leave
// both runs and their cgroups alone, like an empty cgroup under
// CgroupParent that no one can attribute, and still do its own work.
func TestSweepSparesOtherRunDir(t *testing.T) {
	rootfs := testRootfs(t)
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			rt, opts := newBackend(t, name)
			otherOpts := opts
			otherOpts.Settings = maps.Clone(opts.Settings)
			otherOpts.Settings["state_dir"] = filepath.Join(testBase, name+"-other", "state")
			otherOpts.RunDir = filepath.Join(testBase, name+"-other", "runs")
			other, err := runtime.New(name, otherOpts)
			if err != nil {
				t.Fatal(err)
			}
			dir := makeSkill(t, map[string]string{"scripts/sleep.py": "import time\nprint('up', flush=True)\ntime.sleep(1000)\n"})
			cgDirs := func(id string) []string {
				return []string{
					filepath.Join("/sys/fs/cgroup/memory", oci.CgroupParent, id),
					filepath.Join("/sys/fs/cgroup/pids", oci.CgroupParent, id),
				}
			}

			// A run in progress.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			up := make(chan struct{})
			var once sync.Once
			live := runtime.Job{
				Sandbox: runtime.SandboxSpec{
					ID:       newID(),
					RootFS:   rootfs,
					SkillDir: dir,
				},
				Invocation: runtime.Invocation{
					Args:   []string{"python3", "/skill/scripts/sleep.py"},
					Limits: runtime.Limits{Timeout: 10 * time.Minute},
					Stdout: sinkFunc(func(p []byte) {
						if bytes.Contains(p, []byte("up")) {
							once.Do(func() { close(up) })
						}
					}),
				},
			}
			type outcome struct {
				res *runtime.Result
				err error
			}
			liveDone := make(chan outcome, 1)
			go func() {
				res, err := rt.Run(ctx, live)
				liveDone <- outcome{res, err}
			}()
			// A run just made: its bundle and its (runsc-style, pre-made)
			// cgroups exist, nothing runs in them yet.
			young := runtime.Job{Sandbox: runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: dir}, Invocation: runtime.Invocation{Args: []string{"true"}}}
			b, err := oci.PrepareBundle(young, opts.RunDir, oci.SpecOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Remove()
			// A cgroup of no run anyone knows.
			stray := runtime.IDPrefix + "test-stray-" + randomHex(4)
			made := append(cgDirs(young.Sandbox.ID), cgDirs(stray)...)
			defer func() {
				for _, d := range made {
					os.Remove(d)
				}
			}()
			for _, d := range made {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// A dead run of the swept instance, which it must remove.
			dead := newID()
			if err := os.MkdirAll(filepath.Join(otherOpts.RunDir, dead, "work"), 0o711); err != nil {
				t.Fatal(err)
			}

			select {
			case <-up:
			case o := <-liveDone:
				t.Fatalf("live run ended early: %v %+v", o.err, o.res)
			}
			if err := runtime.Sweep(context.Background(), other); err != nil {
				t.Errorf("Sweep: %v", err)
			}

			for _, p := range append(append([]string{
				filepath.Join(opts.RunDir, live.Sandbox.ID), filepath.Join(opts.RunDir, young.Sandbox.ID),
			}, cgDirs(live.Sandbox.ID)...), made...) {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("Sweep of another run dir removed %s", p)
				}
			}
			list, _ := listContainers(name, opts)
			if !strings.Contains(list, live.Sandbox.ID) {
				t.Errorf("Sweep of another run dir removed the live container %s: %q", live.Sandbox.ID, list)
			}
			if _, err := os.Stat(filepath.Join(otherOpts.RunDir, dead)); err == nil {
				t.Errorf("Sweep left its own dead run dir %s", dead)
			}

			cancel()
			o := <-liveDone
			if o.err != nil || o.res.Reason != runtime.ReasonKilled || string(o.res.Stdout) != "up\n" {
				t.Errorf("the live run was disturbed by Sweep: %v %+v", o.err, o.res)
			}
			if err := b.Remove(); err != nil {
				t.Error(err)
			}
			for _, d := range made {
				if err := os.Remove(d); err != nil {
					t.Error(err)
				}
			}
			assertClean(t, name, opts, "")
			assertClean(t, name, otherOpts, "")
		})
	}
}

// BenchmarkColdRun measures one cold run of hello.py end to end (bundle,
// container, teardown) per backend, next to a native python3. Run with
//
//	go test -tags integration -run '^$' -bench ColdRun -benchtime 20x ./runtime/
//
// It reports the median as "median-ms" besides Go's mean ns/op.
func BenchmarkColdRun(b *testing.B) {
	rootfs := testRootfs(b)
	report := func(b *testing.B, d []time.Duration) {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
	}
	for _, name := range backends {
		b.Run(name, func(b *testing.B) {
			rt, _ := newBackend(b, name)
			dir := makeSkill(b, map[string]string{"scripts/hello.py": "print('hello')\n"})
			var d []time.Duration
			for i := 0; i < b.N; i++ {
				job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: newID(), RootFS: rootfs, SkillDir: dir}, Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/hello.py"}}}
				start := time.Now()
				res, err := rt.Run(context.Background(), job)
				d = append(d, time.Since(start))
				if err != nil || string(res.Stdout) != "hello\n" {
					b.Fatalf("run: %v %+v", err, res)
				}
			}
			report(b, d)
		})
	}
	b.Run("native", func(b *testing.B) {
		// The distribution's python3, not a version manager's shim first in PATH.
		python := "/usr/bin/python3"
		if _, err := os.Stat(python); err != nil {
			python = "python3"
		}
		var d []time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if out, err := exec.Command(python, "-c", "print(1)").Output(); err != nil || string(out) != "1\n" {
				b.Fatalf("native python3: %v %q", err, out)
			}
			d = append(d, time.Since(start))
		}
		report(b, d)
	})
}
