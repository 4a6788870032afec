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
	"crypto/rand"
	"encoding/hex"
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

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// makeSkill writes files (relative path -> content) into a fresh skill dir
// readable by the container's nobody.
func makeSkill(t testing.TB, files map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skillbox-skill-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

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

// hostSecret is a file on the host the sandbox must not see.
type hostSecret struct {
	path, value string
}

func newHostSecret(t testing.TB) hostSecret {
	t.Helper()
	s := hostSecret{path: "/tmp/skillbox-secret-" + randomHex(6), value: "SECRET-" + randomHex(12)}
	if err := os.WriteFile(s.path, []byte(s.value+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(s.path) })
	return s
}

const hostEnvName = "SKILLBOX_TEST_HOST_SECRET"

type runCase struct {
	name   string
	skill  map[string]string // files of the skill dir
	links  map[string]string // symlinks in the skill dir: name -> target
	args   func(c *caseEnv) []string
	env    []string
	files  []runtime.InputFile
	stdin  string
	limits runtime.Limits
	check  func(t *testing.T, c *caseEnv, res *runtime.Result)
}

// caseEnv is what a case's args and checks can refer to.
type caseEnv struct {
	backend string
	kernel  string // "runsc" (gVisor's) or "runc" (the host's): what the script talks to
	secret  hostSecret
	envVal  string
	marker  string
	// rootless: an ordinary user's gVisor sandbox (TestRunRootless).
	rootless bool
}

func py(script string) func(*caseEnv) []string {
	return func(*caseEnv) []string { return []string{"python3", "/skill/scripts/" + script} }
}

func wantExit(t *testing.T, res *runtime.Result, code int, reason runtime.Reason) {
	t.Helper()
	if res.ExitCode != code || res.Reason != reason {
		t.Errorf("exit %d reason %s, want exit %d reason %s\nstdout: %s\nstderr: %s",
			res.ExitCode, res.Reason, code, reason, clip(res.Stdout), clip(res.Stderr))
	}
}

// capCase writes four files (4, 4, 1000 and 1 bytes) and expects the cap
// named by its name to leave some out, saying so.
func capCase(capName string, lim runtime.Limits, collected, omitted int, omittedBytes int64) runCase {
	return runCase{
		name:   "cap_" + capName,
		skill:  map[string]string{"scripts/caps.py": "open('a', 'w').write('aaaa')\nopen('b', 'w').write('bbbb')\nopen('c', 'w').write('c' * 1000)\nopen('d', 'w').write('d')\n"},
		args:   py("caps.py"),
		limits: lim,
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			if len(res.Outputs) != collected || !res.OutputsTruncated || res.OutputsTruncatedBy != capName ||
				res.OutputsOmittedFiles != omitted || res.OutputsOmittedBytes != omittedBytes {
				t.Errorf("%d outputs, truncated %v by %q, omitted %d files %d bytes; want %d outputs, %d omitted (%d bytes) by %s",
					len(res.Outputs), res.OutputsTruncated, res.OutputsTruncatedBy, res.OutputsOmittedFiles, res.OutputsOmittedBytes,
					collected, omitted, omittedBytes, capName)
			}
			if !strings.Contains(strings.Join(res.OutputsSkipped, "\n"), "("+capName+")") {
				t.Errorf("skipped %q does not name the cap", res.OutputsSkipped)
			}
		},
	}
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

func noSecret(t *testing.T, res *runtime.Result, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if bytes.Contains(res.Stdout, []byte(s)) || bytes.Contains(res.Stderr, []byte(s)) {
			t.Errorf("secret %q visible in the sandbox\nstdout: %s\nstderr: %s", s, clip(res.Stdout), clip(res.Stderr))
		}
	}
}

func hostRelease(t *testing.T) string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// hostProcsWith lists host processes whose argv contains marker.
func hostProcsWith(marker string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	self := fmt.Sprint(os.Getpid())
	for _, e := range ents {
		if e.Name() == self || e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(raw, []byte(marker)) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(raw), "\x00", " "))
		}
	}
	return found
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
	deadline := time.Now().Add(2 * time.Minute)
	for pool.Stats().Idle == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if st := pool.Stats(); st.Idle == 0 {
		t.Fatalf("no sandbox booted: %+v", st)
	}
	return key
}

// forkBombPy is a python script that forks children sleeping childSleep
// seconds until a fork is refused, says so, and then runs then.
func forkBombPy(childSleep int, then string) string {
	return fmt.Sprintf(`import os, time
n = 0
try:
    while n < 100000:
        if os.fork() == 0:
            time.sleep(%d)
            os._exit(0)
        n += 1
except OSError as e:
    print("fork failed after", n, e, flush=True)
`, childSleep) + then
}

var cases = []runCase{
	{
		name:  "hello_python_args_exit",
		skill: map[string]string{"scripts/hello.py": "import sys\nprint('hello', *sys.argv[1:])\nsys.exit(3)\n"},
		args: func(*caseEnv) []string {
			return []string{"python3", "/skill/scripts/hello.py", "a b", "c"}
		},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 3, runtime.ReasonExit)
			if string(res.Stdout) != "hello a b c\n" || len(res.Stderr) != 0 {
				t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			if res.Runtime != c.backend || res.RuntimeVersion == "" || res.Signal != "" {
				t.Errorf("runtime %q version %q signal %q", res.Runtime, res.RuntimeVersion, res.Signal)
			}
		},
	},
	{
		// A warm run ends the way `python3 SCRIPT` does: threads joined,
		// atexit handlers run, an unclosed file flushed, SystemExit's
		// message printed.
		name: "python_exit_like_the_interpreter",
		skill: map[string]string{"scripts/ends.py": `import atexit, sys, threading, time
atexit.register(lambda: print("atexit ran", flush=True))
kept = open("kept.txt", "w")
kept.write("kept")
def later():
    time.sleep(0.2)
    print("thread done", flush=True)
threading.Thread(target=later).start()
sys.exit("a message")
`},
		args: func(*caseEnv) []string {
			return []string{"python3", "/skill/scripts/ends.py"}
		},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 1, runtime.ReasonExit)
			if string(res.Stdout) != "thread done\natexit ran\n" || string(res.Stderr) != "a message\n" {
				t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			if len(res.Outputs) != 1 || res.Outputs[0].Path != "kept.txt" || string(res.Outputs[0].Data) != "kept" {
				t.Errorf("outputs %+v, want kept.txt = kept", res.Outputs)
			}
		},
	},
	{
		name:  "hello_bash_args_exit",
		skill: map[string]string{"scripts/hello.sh": "echo \"hello $1|$2 from $0\"\nexit 7\n"},
		args: func(*caseEnv) []string {
			return []string{"bash", "/skill/scripts/hello.sh", "x y", "z"}
		},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 7, runtime.ReasonExit)
			if string(res.Stdout) != "hello x y|z from /skill/scripts/hello.sh\n" {
				t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
		},
	},
	{
		name:  "hello_node_args_exit",
		skill: map[string]string{"scripts/hello.js": "console.log('hello', process.argv.slice(2).join(','));\nprocess.exit(5);\n"},
		args: func(*caseEnv) []string {
			return []string{"node", "/skill/scripts/hello.js", "n1", "n2"}
		},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 5, runtime.ReasonExit)
			if string(res.Stdout) != "hello n1,n2\n" {
				t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
		},
	},
	{
		name: "stderr_apart_from_stdout",
		skill: map[string]string{"scripts/streams.py": `import sys
for i in range(3):
    print("out", i, flush=True)
    print("err", i, file=sys.stderr, flush=True)
`},
		args: py("streams.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			if string(res.Stdout) != "out 0\nout 1\nout 2\n" || string(res.Stderr) != "err 0\nerr 1\nerr 2\n" {
				t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
		},
	},
	{
		name:  "stdin_and_env",
		skill: map[string]string{"scripts/env.py": "import os, sys\nprint(sys.stdin.read().upper(), end='')\nfor k in ('FOO', 'HOME', 'LANG', 'PATH'):\n    print(k, os.environ.get(k))\nprint('cwd', os.getcwd())\n"},
		args:  py("env.py"),
		env:   []string{"FOO=bar baz"},
		stdin: "piped in\n",
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			want := "PIPED IN\nFOO bar baz\nHOME /tmp\nLANG C.UTF-8\nPATH " + runtime.DefaultPath + "\ncwd /work\n"
			if string(res.Stdout) != want {
				t.Errorf("stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
			}
		},
	},
	{
		name: "kernel_seen_by_script",
		skill: map[string]string{"scripts/kernel.py": `import os
print(open('/proc/version').read().strip())
print('release', os.uname().release)
`},
		args: py("kernel.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			host := hostRelease(t)
			out := string(res.Stdout)
			if c.kernel == "runsc" {
				// gVisor reports its own (fixed) kernel version, never the host's.
				// (4.4.0 in Debian 12's runsc, 4.19.0-gvisor in the pinned one).
				if strings.Contains(out, host) || !(strings.Contains(out, "release 4.4.0") || strings.Contains(out, "gvisor")) {
					t.Errorf("runsc: want gVisor's kernel, not the host's %s: %s", host, out)
				}
			} else if !strings.Contains(out, "release "+host) {
				t.Errorf("runc: want the host kernel %s: %s", host, out)
			}
		},
	},
	{
		// Under runc the host kernel is shared: its command line, modules
		// and disks are masked (MaskHostInfo); gVisor shows its own.
		name: "host_kernel_info_masked",
		skill: map[string]string{"scripts/hostinfo.py": `for p in ("/proc/cmdline", "/proc/modules", "/proc/partitions"):
    try:
        print(p, repr(open(p).read()))
    except OSError as e:
        print(p, "refused", e.errno)
`},
		args: py("hostinfo.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			out := string(res.Stdout)
			if raw, _ := os.ReadFile("/proc/cmdline"); len(strings.TrimSpace(string(raw))) > 0 && strings.Contains(out, strings.TrimSpace(string(raw))) {
				t.Errorf("%s: the host's kernel command line is readable:\n%s", c.backend, out)
			}
			if c.backend == "runc" {
				for _, p := range []string{"/proc/cmdline", "/proc/modules", "/proc/partitions"} {
					if !strings.Contains(out, p+" ''") && !strings.Contains(out, p+" refused") {
						t.Errorf("runc: %s is not masked:\n%s", p, out)
					}
				}
			}
		},
	},
	{
		name:   "fork_bomb_python",
		skill:  map[string]string{"scripts/forks.py": forkBombPy(60, "")},
		args:   py("forks.py"),
		limits: runtime.Limits{Pids: 32, Timeout: 60 * time.Second},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			if c.rootless {
				wantForksRefused(t, res, 32)
				return
			}
			if res.Reason != runtime.ReasonPids {
				t.Errorf("reason %s exit %d, want pids\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, clip(res.Stdout), clip(res.Stderr))
			}
		},
	},
	{
		name:   "fork_bomb_bash",
		skill:  map[string]string{"scripts/bomb.sh": "b() { b | b & }\nb\nsleep 5\n"},
		args:   func(*caseEnv) []string { return []string{"bash", "/skill/scripts/bomb.sh"} },
		limits: runtime.Limits{Pids: 32, Timeout: 60 * time.Second},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			if c.rootless {
				// The sentry refuses the 33rd task; bash says so and the
				// bomb ends by itself.
				if res.Reason != runtime.ReasonExit || !strings.Contains(string(res.Stderr), "fork") {
					t.Errorf("reason %s exit %d, want refused forks and an exit\nstderr: %s", res.Reason, res.ExitCode, clip(res.Stderr))
				}
				return
			}
			if res.Reason != runtime.ReasonPids {
				t.Errorf("reason %s exit %d, want pids\nstderr: %s", res.Reason, res.ExitCode, clip(res.Stderr))
			}
		},
	},
	{
		// Issue 22: a fork bomb that also filled the memory limit had a
		// process OOM-killed as well as forks refused, and was reported
		// as oom; it is pids whenever pids.max refused a fork. gVisor
		// has no guest pids limit of its own (see runscHostPids): its
		// guest processes cost more memory than runc's, and here they
		// fill the 128 MiB before the scaled host pids.max is reached,
		// so the sandbox dies of its memory limit and pids.max was never
		// hit: oom, truthfully.
		name:   "fork_bomb_then_memory",
		skill:  map[string]string{"scripts/forks.py": forkBombPy(60, "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n")},
		args:   py("forks.py"),
		limits: runtime.Limits{Pids: 32, MemoryBytes: 128 << 20, Timeout: 60 * time.Second},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			if c.kernel == "runsc" {
				if res.Reason != runtime.ReasonPids && res.Reason != runtime.ReasonOOM {
					t.Errorf("reason %s exit %d, want oom (or pids)\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, clip(res.Stdout), clip(res.Stderr))
				}
				return
			}
			if !strings.Contains(string(res.Stdout), "fork failed") || res.Signal != "SIGKILL" {
				t.Errorf("want a refused fork, then the memory limit's SIGKILL; got signal %q, stdout: %s", res.Signal, clip(res.Stdout))
			}
			if res.Reason != runtime.ReasonPids {
				t.Errorf("reason %s exit %d, want pids\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, clip(res.Stdout), clip(res.Stderr))
			}
		},
	},
	{
		// Issue 22: a fork bomb whose parent waits on after its forks were
		// refused is stopped by the timer, and is pids all the same.
		name:   "fork_bomb_until_timeout",
		skill:  map[string]string{"scripts/forks.py": forkBombPy(600, "time.sleep(600)\n")},
		args:   py("forks.py"),
		limits: runtime.Limits{Pids: 32, Timeout: 12 * time.Second}, // room to start on a loaded machine
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			if c.rootless {
				if res.Reason != runtime.ReasonTimeout || !strings.Contains(string(res.Stdout), "fork failed after") {
					t.Errorf("reason %s exit %d, want refused forks, then the timeout\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, clip(res.Stdout), clip(res.Stderr))
				}
				return
			}
			if res.Reason != runtime.ReasonPids {
				t.Errorf("reason %s exit %d, want pids\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, clip(res.Stdout), clip(res.Stderr))
			}
		},
	},
	{
		name: "memory_hog",
		skill: map[string]string{"scripts/hog.py": `chunks = []
while True:
    chunks.append(bytearray(8 << 20))
`},
		args:   py("hog.py"),
		limits: runtime.Limits{MemoryBytes: 128 << 20, Timeout: 60 * time.Second},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			if res.Reason != runtime.ReasonOOM || res.Signal != "SIGKILL" {
				t.Errorf("reason %s exit %d signal %q, want oom by SIGKILL\nstderr: %s", res.Reason, res.ExitCode, res.Signal, clip(res.Stderr))
			}
		},
	},
	{
		name: "timeout_evasion",
		skill: map[string]string{"scripts/evade.py": `import os, signal, sys, time
marker = sys.argv[1]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("python3", ["python3", "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)", marker])
    os._exit(0)
print("ready", flush=True)
while True:
    time.sleep(1)
`},
		args: func(c *caseEnv) []string {
			return []string{"python3", "/skill/scripts/evade.py", c.marker}
		},
		limits: runtime.Limits{Timeout: 12 * time.Second}, // room to start on a loaded machine
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			if res.Reason != runtime.ReasonTimeout || res.Signal != "SIGKILL" {
				t.Errorf("reason %s signal %q, want timeout by SIGKILL", res.Reason, res.Signal)
			}
			if !strings.Contains(string(res.Stdout), "ready") {
				t.Errorf("script did not start: %s %s", res.Stdout, res.Stderr)
			}
			if left := hostProcsWith(c.marker); len(left) > 0 {
				t.Errorf("processes left on the host: %v", left)
			}
		},
	},
	{
		name: "timeout_term_delivered",
		skill: map[string]string{"scripts/term.py": `import signal, sys, time
def on_term(*_):
    print("got TERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("waiting", flush=True)
time.sleep(1000)
`},
		args:   py("term.py"),
		limits: runtime.Limits{Timeout: 12 * time.Second}, // room to start on a loaded machine
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			// The script handles TERM within the grace period and exits 0; the
			// run still ended because of the timeout.
			wantExit(t, res, 0, runtime.ReasonTimeout)
			if string(res.Stdout) != "waiting\ngot TERM\n" {
				t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
		},
	},
	{
		name:   "output_flood",
		skill:  map[string]string{"scripts/flood.py": "import sys\nline = 'x' * 1023 + '\\n'\nwhile True:\n    sys.stdout.write(line)\n"},
		args:   py("flood.py"),
		limits: runtime.Limits{StdoutBytes: 64 << 10, Timeout: 60 * time.Second},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			if res.Reason != runtime.ReasonOutputCap || !res.StdoutTruncated || len(res.Stdout) != 64<<10 {
				t.Errorf("reason %s truncated %v len %d, want output_cap, truncated, %d bytes", res.Reason, res.StdoutTruncated, len(res.Stdout), 64<<10)
			}
		},
	},
	{
		name:   "output_over_cap_then_exit",
		skill:  map[string]string{"scripts/over.py": "import sys\nsys.stdout.write('y' * 5000)\n"},
		args:   py("over.py"),
		limits: runtime.Limits{StdoutBytes: 4096},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			// Whether the script's exit or our kill came first, the reason
			// is the same.
			if res.Reason != runtime.ReasonOutputCap || !res.StdoutTruncated || string(res.Stdout) != strings.Repeat("y", 4096) {
				t.Errorf("reason %s truncated %v len %d", res.Reason, res.StdoutTruncated, len(res.Stdout))
			}
		},
	},
	{
		name:   "stderr_flood",
		skill:  map[string]string{"scripts/eflood.sh": "yes error-line >&2\n"},
		args:   func(*caseEnv) []string { return []string{"bash", "/skill/scripts/eflood.sh"} },
		limits: runtime.Limits{StderrBytes: 16 << 10, Timeout: 60 * time.Second},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			if res.Reason != runtime.ReasonOutputCap || !res.StderrTruncated || len(res.Stderr) != 16<<10 || res.StdoutTruncated {
				t.Errorf("reason %s stderr truncated %v len %d", res.Reason, res.StderrTruncated, len(res.Stderr))
			}
		},
	},
	{
		name: "network_blocked",
		skill: map[string]string{"scripts/net.py": `import socket
for host, port in (("1.1.1.1", 80), ("169.254.169.254", 80), ("127.0.0.1", 22)):
    try:
        s = socket.create_connection((host, port), timeout=5)
        print("CONNECTED", host)
    except OSError as e:
        print("blocked", host, type(e).__name__)
try:
    print("RESOLVED", socket.getaddrinfo("deb.debian.org", 80))
except OSError as e:
    print("dns blocked", type(e).__name__)
`},
		args:   py("net.py"),
		limits: runtime.Limits{Timeout: 60 * time.Second},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			out := string(res.Stdout)
			if strings.Contains(out, "CONNECTED") || strings.Contains(out, "RESOLVED") || strings.Count(out, "blocked") != 4 {
				t.Errorf("network reachable:\n%s\n%s", out, res.Stderr)
			}
		},
	},
	{
		name: "host_files_invisible",
		skill: map[string]string{"scripts/peek.py": `import sys
for p in sys.argv[1:]:
    try:
        print(p, "READ", open(p).read())
    except OSError as e:
        print(p, "denied", type(e).__name__)
`},
		links: map[string]string{"scripts/link": "SECRET_PATH"},
		args: func(c *caseEnv) []string {
			return []string{"python3", "/skill/scripts/peek.py", c.secret.path, "/proc/1/root" + c.secret.path, "/skill/scripts/link", "/proc/self/root" + c.secret.path}
		},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			noSecret(t, res, c.secret.value)
			if strings.Count(string(res.Stdout), "denied") != 4 {
				t.Errorf("want 4 denials:\n%s", res.Stdout)
			}
		},
	},
	{
		name:  "host_env_invisible",
		skill: map[string]string{"scripts/environ.py": "import os\nprint(dict(os.environ))\nprint(open('/proc/1/environ').read())\n"},
		args:  py("environ.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			noSecret(t, res, c.envVal, hostEnvName)
		},
	},
	{
		name: "skill_read_only",
		skill: map[string]string{"scripts/write.py": `import os
for p in ("/skill/new.txt", "/skill/scripts/write.py", "/etc/passwd", "/usr/bin/new"):
    try:
        with open(p, "a") as f:
            f.write("x")
        print(p, "WRITTEN")
    except OSError as e:
        print(p, "refused", e.errno)
`},
		args: py("write.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			if strings.Contains(string(res.Stdout), "WRITTEN") || strings.Count(string(res.Stdout), "refused") != 4 {
				t.Errorf("writes outside /work:\n%s", res.Stdout)
			}
		},
	},
	{
		name:  "no_capabilities",
		skill: map[string]string{"scripts/caps.py": "for l in open('/proc/self/status'):\n    if l.startswith(('Cap', 'NoNewPrivs', 'Uid', 'Gid')):\n        print(l.strip())\n"},
		args:  py("caps.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			out := string(res.Stdout)
			uid := "Uid:\t65534\t65534\t65534\t65534"
			if c.rootless {
				uid = "Uid:\t0\t0\t0\t0" // gVisor's uid 0: the user on the host, still without capabilities
			}
			for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", uid} {
				if !strings.Contains(out, want) {
					t.Errorf("missing %q in\n%s", want, out)
				}
			}
			if c.kernel == "runc" && !strings.Contains(out, "NoNewPrivs:\t1") {
				t.Errorf("no_new_privs not set:\n%s", out)
			}
		},
	},
	{
		name: "namespace_and_mount_refused",
		skill: map[string]string{"scripts/ns.py": `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
r = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
print("unshare", r, ctypes.get_errno())
r = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
print("mount", r, ctypes.get_errno())
`},
		args: py("ns.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			out := string(res.Stdout)
			// runc: the seccomp profile refuses both with EPERM. gVisor
			// implements namespaces inside its own kernel, so there only the
			// mount (no capability) must fail.
			// A modern gVisor lets the script unshare a user namespace of
			// its own, in which it may then mount a tmpfs: all of it inside
			// gVisor's kernel, with no effect on the host.
			inOwnNS := c.kernel == "runsc" && strings.Contains(out, "unshare 0 0\n")
			if !(strings.Contains(out, "mount -1 1\n") || inOwnNS) || (c.kernel == "runc" && !strings.Contains(out, "unshare -1 1\n")) {
				t.Errorf("want EPERM:\n%s%s", out, res.Stderr)
			}
		},
	},
	{
		name: "inputs_and_outputs",
		skill: map[string]string{"scripts/io.py": `import os
print(open("data.csv").read(), end="")
print(oct(os.stat("run.sh").st_mode & 0o777))
os.makedirs("outputs/sub", exist_ok=True)
open("outputs/result.txt", "w").write("result\n")
open("outputs/sub/nested.txt", "w").write("nested\n")
os.symlink("/etc/passwd", "outputs/passwd-link")
os.mkfifo("outputs/fifo")
`},
		files: []runtime.InputFile{
			{Name: "data.csv", Data: []byte("a,b\n1,2\n")},
			{Name: "run.sh", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		},
		args: py("io.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			if string(res.Stdout) != "a,b\n1,2\n0o755\n" {
				t.Errorf("inputs not seen: %q %s", res.Stdout, res.Stderr)
			}
			got := map[string]string{}
			for _, o := range res.Outputs {
				got[o.Path] = string(o.Data)
			}
			// Unchanged inputs (data.csv, run.sh) are not outputs.
			if len(got) != 2 || got["outputs/result.txt"] != "result\n" || got["outputs/sub/nested.txt"] != "nested\n" {
				t.Errorf("outputs %v", got)
			}
			sk := strings.Join(res.OutputsSkipped, "\n")
			// gVisor keeps a FIFO made on a gofer mount inside the sandbox;
			// runc leaves it on the host tmpfs, where it must be skipped.
			if !strings.Contains(sk, "passwd-link: symlink") || (c.kernel == "runc" && !strings.Contains(sk, "fifo: fifo")) {
				t.Errorf("skipped %q", res.OutputsSkipped)
			}
		},
	},
	{
		name: "directory_inputs_round_trip",
		skill: map[string]string{"scripts/tree.py": `import os
for root, dirs, files in sorted(os.walk(".")):
    dirs.sort()
    for n in sorted(dirs + files):
        p = os.path.join(root, n)[2:]
        kind = "L" if os.path.islink(p) else "D" if os.path.isdir(p) else "F"
        print(kind, p, oct(os.lstat(p).st_mode & 0o777))
print("link", os.readlink("unpacked/link"))
print(open("unpacked/ppt/slides/slide1.xml").read())
open("unpacked/ppt/presentation.xml", "w").write("<changed/>")
os.makedirs("unpacked/ppt/media", exist_ok=True)
open("unpacked/ppt/media/image1.png", "wb").write(b"\x89PNG")
open("top.txt", "w").write("top")
os.makedirs("a/b/c/d", exist_ok=True)
open("a/b/c/d/deep.txt", "w").write("deep")
# HOME is writable and outside /work: a tool profile there is no output.
os.makedirs(os.path.expanduser("~/.config/libreoffice"), exist_ok=True)
open(os.path.expanduser("~/.config/libreoffice/profile.xcu"), "w").write("profile")
print("home", os.environ["HOME"], os.path.expanduser("~"))
`},
		files: []runtime.InputFile{
			{Name: "unpacked", Kind: runtime.InputDir},
			{Name: "unpacked/[Content_Types].xml", Data: []byte("<Types/>")},
			{Name: "unpacked/ppt/presentation.xml", Data: []byte("<p/>")},
			{Name: "unpacked/ppt/slides/slide1.xml", Data: []byte("<slide1/>"), Mode: 0o600},
			{Name: "unpacked/ppt/empty", Kind: runtime.InputDir, Mode: 0o750},
			{Name: "unpacked/link", Kind: runtime.InputSymlink, Target: "../../etc/passwd"},
		},
		args: py("tree.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			want := `D outputs 0o755
D unpacked 0o755
F unpacked/[Content_Types].xml 0o644
L unpacked/link 0o777
D unpacked/ppt 0o755
D unpacked/ppt/empty 0o750
F unpacked/ppt/presentation.xml 0o644
D unpacked/ppt/slides 0o755
F unpacked/ppt/slides/slide1.xml 0o600
link ../../etc/passwd
<slide1/>
home /tmp /tmp
`
			if string(res.Stdout) != want {
				t.Errorf("tree in the sandbox:\n%s\nwant:\n%s\nstderr: %s", res.Stdout, want, res.Stderr)
			}
			var got []string
			for _, o := range res.Outputs {
				got = append(got, o.Path+"="+string(o.Data))
			}
			// Changed and new files anywhere in /work, with their paths;
			// unchanged inputs and the input link are not reported.
			if w := "a/b/c/d/deep.txt=deep,top.txt=top,unpacked/ppt/media/image1.png=\x89PNG,unpacked/ppt/presentation.xml=<changed/>"; strings.Join(got, ",") != w {
				t.Errorf("outputs %q, want %q", got, w)
			}
			if len(res.OutputsSkipped) != 0 || res.OutputsTruncated {
				t.Errorf("skipped %q truncated %v", res.OutputsSkipped, res.OutputsTruncated)
			}
		},
	},
	{
		name: "hostile_outputs_not_followed",
		skill: map[string]string{"scripts/hostile.py": `import os, socket
os.symlink("/etc/passwd", "abs-link")
os.symlink("../../../../etc/shadow", "rel-escape")
os.symlink("nowhere", "dangling")
os.symlink("/tmp", "dirlink")
open("dirlink/through.txt", "w").write("via the link")
os.makedirs("outputs", exist_ok=True)
os.symlink("/etc", "outputs/etc")
os.mkfifo("fifo")
s = socket.socket(socket.AF_UNIX)
s.bind("sock")
open("outputs/real.txt", "w").write("real")
`},
		args: py("hostile.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			if len(res.Outputs) != 1 || res.Outputs[0].Path != "outputs/real.txt" || string(res.Outputs[0].Data) != "real" {
				var paths []string
				for _, o := range res.Outputs {
					paths = append(paths, o.Path)
				}
				t.Errorf("outputs %q, want only outputs/real.txt", paths)
			}
			sk := strings.Join(res.OutputsSkipped, "\n")
			for _, w := range []string{"abs-link: symlink", "rel-escape: symlink", "dangling: symlink", "dirlink: symlink", "outputs/etc: symlink"} {
				if !strings.Contains(sk, w) {
					t.Errorf("skipped %q lacks %q", res.OutputsSkipped, w)
				}
			}
			// gVisor keeps FIFOs and sockets made on a gofer mount inside
			// the sandbox; runc leaves them on the host tmpfs.
			if c.kernel == "runc" && (!strings.Contains(sk, "fifo: fifo") || !strings.Contains(sk, "sock: socket")) {
				t.Errorf("skipped %q lacks the fifo and the socket", res.OutputsSkipped)
			}
		},
	},
	{
		name:  "five_thousand_outputs",
		skill: map[string]string{"scripts/many.py": "import os\nfor d in range(50):\n    os.makedirs(f'parts/p{d:02}', exist_ok=True)\n    for f in range(100):\n        open(f'parts/p{d:02}/{f:03}.xml', 'w').write(f'<x n=\"{d}.{f}\"/>')\n"},
		args:  py("many.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			if len(res.Outputs) != 5000 || res.OutputsTruncated || len(res.OutputsSkipped) != 0 {
				t.Fatalf("%d outputs, truncated %v, skipped %q", len(res.Outputs), res.OutputsTruncated, res.OutputsSkipped)
			}
			if o := res.Outputs[4999]; o.Path != "parts/p49/099.xml" || string(o.Data) != `<x n="49.99"/>` {
				t.Errorf("last output %s=%q", o.Path, o.Data)
			}
		},
	},
	capCase(runtime.CapOutputFiles, runtime.Limits{OutputFiles: 2}, 2, 2, 1000+1),
	capCase(runtime.CapOutputBytes, runtime.Limits{OutputBytes: 10}, 3, 1, 1000),
	capCase(runtime.CapOutputFileBytes, runtime.Limits{OutputFileBytes: 100}, 3, 1, 1000),
	{
		name: "localhost_server",
		skill: map[string]string{"scripts/serve.py": `import http.server, socket, threading, urllib.request
print("resolves", socket.gethostbyname("localhost"))
srv = http.server.HTTPServer(("localhost", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
open("page.txt", "w").write("served from the sandbox")
print(urllib.request.urlopen("http://localhost:%d/page.txt" % srv.server_address[1], timeout=20).read().decode())
`},
		args: py("serve.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			if string(res.Stdout) != "resolves 127.0.0.1\nserved from the sandbox\n" {
				t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
			}
		},
	},
	{
		name:  "loopback_up_from_shell",
		skill: map[string]string{"scripts/lo.sh": "getent hosts localhost | awk '{print $2}'\n(echo hi > /dev/tcp/127.0.0.1/9) 2>&1 | tail -n 1 | sed 's/.*: //'\n(echo x >> /etc/hosts) 2>/dev/null && echo WRITABLE\nexit 0\n"},
		args: func(*caseEnv) []string {
			return []string{"bash", "/skill/scripts/lo.sh"}
		},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			// Refused (nothing listens), not unreachable: lo is up; and
			// the hosts file is read-only.
			if out := string(res.Stdout); out != "localhost\nConnection refused\n" {
				t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
			}
		},
	},
	{
		name: "module_path_from_skill_root",
		skill: map[string]string{
			"scripts/__init__.py": "",
			"scripts/utils.py":    "def greet(): return 'from scripts.utils'\n",
			"scripts/sibling.py":  "NAME = 'sibling'\n",
			"scripts/main.py":     "from scripts.utils import greet\nimport sibling\nprint(greet(), sibling.NAME)\n",
		},
		args: py("main.py"),
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			if string(res.Stdout) != "from scripts.utils sibling\n" {
				t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
			}
		},
	},
	{
		name:   "workdir_size_capped",
		skill:  map[string]string{"scripts/fill.py": "import errno\ntry:\n    open('big', 'wb').write(b'x' * (8 << 20))\n    print('WROTE')\nexcept OSError as e:\n    print('full', errno.errorcode[e.errno])\n"},
		args:   py("fill.py"),
		limits: runtime.Limits{WorkdirBytes: 4 << 20},
		check: func(t *testing.T, c *caseEnv, res *runtime.Result) {
			wantExit(t, res, 0, runtime.ReasonExit)
			if string(res.Stdout) != "full ENOSPC\n" {
				t.Errorf("workdir not capped: %q %s", res.Stdout, res.Stderr)
			}
		},
	},
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
func runCases(t *testing.T, name, rootfs string, secret hostSecret, envVal string) {
	rt, opts := newBackend(t, name)
	for _, mode := range []string{"cold", "warm"} {
		t.Run(mode, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					c := &caseEnv{backend: name, kernel: kernelOf(name), secret: secret, envVal: envVal, marker: "skillbox-marker-" + randomHex(8), rootless: opts.Rootless}
					dir := makeSkill(t, tc.skill)
					for link, target := range tc.links {
						if target == "SECRET_PATH" {
							target = secret.path
						}
						if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
							t.Fatal(err)
						}
					}
					job := runtime.Job{
						ID:       newID(),
						RootFS:   rootfs,
						SkillDir: dir,
						Args:     tc.args(c),
						Env:      tc.env,
						Stdin:    []byte(tc.stdin),
						Files:    tc.files,
						Limits:   tc.limits,
					}
					if a := job.Args; len(a) > 1 && strings.HasPrefix(a[1], runtime.SkillMount+"/") {
						family := map[string]string{"python3": "python", "node": "node"}[a[0]]
						job.ModuleEnv = runtime.ModulePathEnv(family, strings.TrimPrefix(a[1], runtime.SkillMount+"/"))
					}
					if job.Limits.Timeout == 0 {
						job.Limits.Timeout = 60 * time.Second
					}
					var res *runtime.Result
					var err error
					if mode == "cold" {
						res, err = rt.Run(context.Background(), job)
					} else {
						res, err = runWarm(t, rt, job)
					}
					if err != nil {
						t.Fatalf("Run: %v", err)
					}
					if res.Warm != (mode == "warm") {
						t.Errorf("result says warm %v on the %s path", res.Warm, mode)
					}
					tc.check(t, c, res)
					assertClean(t, name, opts, job.ID)
				})
			}
		})
	}
}

// runWarm runs job the way the pool does: boot, then (the sandbox
// waiting) deliver, wait, destroy.
func runWarm(t testing.TB, rt runtime.Runtime, job runtime.Job) (*runtime.Result, error) {
	t.Helper()
	lc, ok := rt.(runtime.Lifecycle)
	if !ok {
		t.Fatalf("%s has no lifecycle", rt.Name())
	}
	boot := runtime.BootExec
	if runtime.PythonInvocation(job.Args) {
		boot = runtime.BootPython
	}
	ctx := context.Background()
	sb, err := lc.Create(ctx, runtime.SandboxSpec{ID: job.ID, RootFS: job.RootFS, SkillDir: job.SkillDir, DepsDir: job.DepsDir, Limits: job.Limits, Network: job.Network, Boot: boot})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}()
	if err := sb.Start(ctx); err != nil {
		return nil, err
	}
	inv := runtime.Invocation{Args: job.Args, Env: job.Env, ModuleEnv: job.ModuleEnv, Stdin: job.Stdin, Files: job.Files,
		Limits: job.Limits, Stdout: job.Stdout, Stderr: job.Stderr}
	if err := sb.Deliver(ctx, inv); err != nil {
		return nil, err
	}
	return sb.Wait(ctx)
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
				job := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir, Args: []string{"true"}, Env: env}
				_, err := rt.Run(context.Background(), job)
				if !errors.Is(err, runtime.ErrInvalidJob) {
					t.Errorf("env %v: err %v, want ErrInvalidJob", env, err)
				}
				assertClean(t, name, opts, job.ID)
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
				job := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir, Args: []string{"true"}, Files: files}
				_, err := rt.Run(context.Background(), job)
				if !errors.Is(err, runtime.ErrInvalidJob) {
					t.Errorf("files %q: err %v, want ErrInvalidJob", files[len(files)-1].Name, err)
				}
				assertClean(t, name, opts, job.ID)
			}
			// An image without the /etc/hosts mount point is refused, not
			// run with localhost unresolvable.
			bare := t.TempDir()
			job0 := runtime.Job{ID: newID(), RootFS: bare, SkillDir: dir, Args: []string{"true"}}
			if _, err := rt.Run(context.Background(), job0); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "/etc/hosts") {
				t.Errorf("rootfs without /etc/hosts: err %v, want ErrUnavailable naming /etc/hosts", err)
			}
			assertClean(t, name, opts, job0.ID)
			// Network without a configured namespace is refused, not faked.
			job := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir, Args: []string{"true"}, Network: true}
			if _, err := rt.Run(context.Background(), job); !errors.Is(err, runtime.ErrUnavailable) {
				t.Errorf("network without netns: err %v, want ErrUnavailable", err)
			}
			assertClean(t, name, opts, job.ID)
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
			job := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir, Args: []string{"python3", "/skill/scripts/sleep.py", marker},
				Stdout: sinkFunc(func(p []byte) {
					if bytes.Contains(p, []byte("up")) {
						cancel()
					}
				})}
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
			assertClean(t, name, opts, job.ID)
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
			job := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir, Args: []string{"bash", "/skill/scripts/flood.sh"},
				Limits: runtime.Limits{StdoutBytes: 1 << 20, Timeout: 120 * time.Second}}
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
			assertClean(t, name, opts, job.ID)
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
					job := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir,
						Args:  []string{"python3", "/skill/scripts/echo.py", fmt.Sprint(i)},
						Files: []runtime.InputFile{{Name: "in.txt", Data: []byte(fmt.Sprintf("run-%d:", i))}}}
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
	job := runtime.Job{ID: id, RootFS: rootfs, SkillDir: skill,
		Args: []string{"python3", "/skill/scripts/sleep.py", marker},
		Stdout: sinkFunc(func(p []byte) {
			if mode == "up" && bytes.Contains(p, []byte("up")) {
				fmt.Println("crashing now")
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}),
		Limits: runtime.Limits{Timeout: 10 * time.Minute},
	}
	if mode == "egress-up" {
		job.Egress, mode = &egress.Config{}, "up"
	}
	if mode == "image-up" {
		// A sandbox on a snapshot of a store image (containerd): its
		// name, digest and layout follow.
		job.Image = runtime.ImageRef{Name: f[8], Digest: f[9], Layout: f[10]}
		job.SkillDir, job.Args, mode = "", []string{"/bin/sh", "-c", "echo up; exec sleep 1000", marker}, "up"
	}
	if mode == "early" {
		fmt.Println("running")
	}
	if mode == "warm-idle" {
		// A pooled sandbox, booted and waiting for a job, when its
		// process dies.
		ctx := context.Background()
		sb, err := rt.(runtime.Lifecycle).Create(ctx, runtime.SandboxSpec{ID: id, RootFS: rootfs, SkillDir: skill, Limits: job.Limits, Boot: runtime.BootPython})
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
			liveJob := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir,
				Args: []string{"python3", "-c", "import time; print('up', flush=True); time.sleep(3); print('done')"},
				Stdout: sinkFunc(func(p []byte) {
					if bytes.Contains(p, []byte("up")) {
						once.Do(func() { close(up) })
					}
				})}
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
			deadline := time.Now().Add(10 * time.Second)
			for len(hostProcsWith(marker)) > 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
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
			deadline := time.Now().Add(30 * time.Second)
			for len(hostProcsWith(marker)) > 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
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
					deadline := time.Now().Add(30 * time.Second)
					for len(hostProcsWith(id))+len(hostProcsWith(marker)) > 0 && time.Now().Before(deadline) {
						time.Sleep(100 * time.Millisecond)
					}
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
			live := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir, Args: []string{"python3", "/skill/scripts/sleep.py"},
				Limits: runtime.Limits{Timeout: 10 * time.Minute},
				Stdout: sinkFunc(func(p []byte) {
					if bytes.Contains(p, []byte("up")) {
						once.Do(func() { close(up) })
					}
				})}
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
			young := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir, Args: []string{"true"}}
			b, err := oci.PrepareBundle(young, opts.RunDir, oci.SpecOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Remove()
			// A cgroup of no run anyone knows.
			stray := runtime.IDPrefix + "test-stray-" + randomHex(4)
			made := append(cgDirs(young.ID), cgDirs(stray)...)
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
				filepath.Join(opts.RunDir, live.ID), filepath.Join(opts.RunDir, young.ID),
			}, cgDirs(live.ID)...), made...) {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("Sweep of another run dir removed %s", p)
				}
			}
			list, _ := listContainers(name, opts)
			if !strings.Contains(list, live.ID) {
				t.Errorf("Sweep of another run dir removed the live container %s: %q", live.ID, list)
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
				job := runtime.Job{ID: newID(), RootFS: rootfs, SkillDir: dir, Args: []string{"python3", "/skill/scripts/hello.py"}}
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
