package runtimetest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// The run table: every backend runs the same cases (exit codes, limits,
// timeouts, output caps, hostile scripts, outputs by path, ...), cold and
// warm, through Table. What differs by design between backends is said in
// the checks, through CaseEnv, never by leaving a backend out silently.

// Cases is the table, a fresh copy for each caller.
func Cases() []Case {
	return []Case{
		{
			Name:  "hello_python_args_exit",
			Skill: map[string]string{"scripts/hello.py": "import sys\nprint('hello', *sys.argv[1:])\nsys.exit(3)\n"},
			Args: func(*CaseEnv) []string {
				return []string{"python3", "/skill/scripts/hello.py", "a b", "c"}
			},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 3, runtime.ReasonExit)
				if string(res.Stdout) != "hello a b c\n" || len(res.Stderr) != 0 {
					t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
				}
				if res.Runtime != c.Backend || res.RuntimeVersion == "" || res.Signal != "" {
					t.Errorf("runtime %q version %q signal %q", res.Runtime, res.RuntimeVersion, res.Signal)
				}
			},
		},
		{
			// A warm run ends the way `python3 SCRIPT` does: threads joined,
			// atexit handlers run, an unclosed file flushed, SystemExit's
			// message printed.
			Name: "python_exit_like_the_interpreter",
			Skill: map[string]string{"scripts/ends.py": `import atexit, sys, threading, time
atexit.register(lambda: print("atexit ran", flush=True))
kept = open("kept.txt", "w")
kept.write("kept")
def later():
    time.sleep(0.2)
    print("thread done", flush=True)
threading.Thread(target=later).start()
sys.exit("a message")
`},
			Args: func(*CaseEnv) []string {
				return []string{"python3", "/skill/scripts/ends.py"}
			},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 1, runtime.ReasonExit)
				if string(res.Stdout) != "thread done\natexit ran\n" || string(res.Stderr) != "a message\n" {
					t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
				}
				if len(res.Outputs) != 1 || res.Outputs[0].Path != "kept.txt" || string(res.Outputs[0].Data) != "kept" {
					t.Errorf("outputs %+v, want kept.txt = kept", res.Outputs)
				}
			},
		},
		{
			Name:  "hello_bash_args_exit",
			Skill: map[string]string{"scripts/hello.sh": "echo \"hello $1|$2 from $0\"\nexit 7\n"},
			Args: func(*CaseEnv) []string {
				return []string{"bash", "/skill/scripts/hello.sh", "x y", "z"}
			},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 7, runtime.ReasonExit)
				if string(res.Stdout) != "hello x y|z from /skill/scripts/hello.sh\n" {
					t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name:  "hello_node_args_exit",
			Skill: map[string]string{"scripts/hello.js": "console.log('hello', process.argv.slice(2).join(','));\nprocess.exit(5);\n"},
			Args: func(*CaseEnv) []string {
				return []string{"node", "/skill/scripts/hello.js", "n1", "n2"}
			},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 5, runtime.ReasonExit)
				if string(res.Stdout) != "hello n1,n2\n" {
					t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name: "stderr_apart_from_stdout",
			Skill: map[string]string{"scripts/streams.py": `import sys
for i in range(3):
    print("out", i, flush=True)
    print("err", i, file=sys.stderr, flush=True)
`},
			Args: Py("streams.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if string(res.Stdout) != "out 0\nout 1\nout 2\n" || string(res.Stderr) != "err 0\nerr 1\nerr 2\n" {
					t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name:  "stdin_and_env",
			Skill: map[string]string{"scripts/env.py": "import os, sys\nprint(sys.stdin.read().upper(), end='')\nfor k in ('FOO', 'HOME', 'LANG', 'PATH'):\n    print(k, os.environ.get(k))\nprint('cwd', os.getcwd())\n"},
			Args:  Py("env.py"),
			Env:   []string{"FOO=bar baz"},
			Stdin: "piped in\n",
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				want := "PIPED IN\nFOO bar baz\nHOME /tmp\nLANG C.UTF-8\nPATH " + runtime.DefaultPath + "\ncwd /work\n"
				if string(res.Stdout) != want {
					t.Errorf("stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
				}
			},
		},
		{
			Name: "kernel_seen_by_script",
			Skill: map[string]string{"scripts/kernel.py": `import os
print(open('/proc/version').read().strip())
print('release', os.uname().release)
`},
			Args: Py("kernel.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				host := HostRelease(t)
				out := string(res.Stdout)
				if c.Kernel == KernelGVisor {
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
			Name: "host_kernel_info_masked",
			Skill: map[string]string{"scripts/hostinfo.py": `for p in ("/proc/cmdline", "/proc/modules", "/proc/partitions"):
    try:
        print(p, repr(open(p).read()))
    except OSError as e:
        print(p, "refused", e.errno)
`},
			Args: Py("hostinfo.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				out := string(res.Stdout)
				if raw, _ := os.ReadFile("/proc/cmdline"); len(strings.TrimSpace(string(raw))) > 0 && strings.Contains(out, strings.TrimSpace(string(raw))) {
					t.Errorf("%s: the host's kernel command line is readable:\n%s", c.Backend, out)
				}
				if c.Backend == "runc" {
					for _, p := range []string{"/proc/cmdline", "/proc/modules", "/proc/partitions"} {
						if !strings.Contains(out, p+" ''") && !strings.Contains(out, p+" refused") {
							t.Errorf("runc: %s is not masked:\n%s", p, out)
						}
					}
				}
			},
		},
		{
			Name:   "fork_bomb_python",
			Skill:  map[string]string{"scripts/forks.py": ForkBombPy(60, "")},
			Args:   Py("forks.py"),
			Limits: runtime.Limits{Pids: 32, Timeout: 60 * time.Second},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				if c.PidsUnenforced {
					wantBombContained(t, res)
					return
				}
				if c.Rootless {
					WantForksRefused(t, res, 32)
					return
				}
				if res.Reason != runtime.ReasonPids {
					t.Errorf("reason %s exit %d, want pids\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, Clip(res.Stdout), Clip(res.Stderr))
				}
			},
		},
		{
			Name:   "fork_bomb_bash",
			Skill:  map[string]string{"scripts/bomb.sh": "b() { b | b & }\nb\nsleep 5\n"},
			Args:   func(*CaseEnv) []string { return []string{"bash", "/skill/scripts/bomb.sh"} },
			Limits: runtime.Limits{Pids: 32, Timeout: 60 * time.Second},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				if c.PidsUnenforced {
					wantBombContained(t, res)
					return
				}
				if c.Rootless {
					// The sentry refuses the 33rd task; bash says so and the
					// bomb ends by itself.
					if res.Reason != runtime.ReasonExit || !strings.Contains(string(res.Stderr), "fork") {
						t.Errorf("reason %s exit %d, want refused forks and an exit\nstderr: %s", res.Reason, res.ExitCode, Clip(res.Stderr))
					}
					return
				}
				if res.Reason != runtime.ReasonPids {
					t.Errorf("reason %s exit %d, want pids\nstderr: %s", res.Reason, res.ExitCode, Clip(res.Stderr))
				}
			},
		},
		{
			// A fork bomb that also filled the memory limit once had a
			// process OOM-killed as well as forks refused, and was reported
			// as oom; it is pids whenever pids.max refused a fork. gVisor
			// has no guest pids limit of its own (see runscHostPids): its
			// guest processes cost more memory than runc's, and here they
			// fill the 128 MiB before the scaled host pids.max is reached,
			// so the sandbox dies of its memory limit and pids.max was never
			// hit: oom, truthfully.
			Name:   "fork_bomb_then_memory",
			Skill:  map[string]string{"scripts/forks.py": ForkBombPy(60, "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n")},
			Args:   Py("forks.py"),
			Limits: runtime.Limits{Pids: 32, MemoryBytes: 128 << 20, Timeout: 60 * time.Second},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				if c.PidsUnenforced {
					wantBombContained(t, res)
					return
				}
				if c.Kernel == KernelGVisor {
					if res.Reason != runtime.ReasonPids && res.Reason != runtime.ReasonOOM {
						t.Errorf("reason %s exit %d, want oom (or pids)\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, Clip(res.Stdout), Clip(res.Stderr))
					}
					return
				}
				if !strings.Contains(string(res.Stdout), "fork failed") || res.Signal != "SIGKILL" {
					t.Errorf("want a refused fork, then the memory limit's SIGKILL; got signal %q, stdout: %s", res.Signal, Clip(res.Stdout))
				}
				if res.Reason != runtime.ReasonPids {
					t.Errorf("reason %s exit %d, want pids\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, Clip(res.Stdout), Clip(res.Stderr))
				}
			},
		},
		{
			// A fork bomb whose parent waits on after its forks were
			// refused is stopped by the timer, and is pids all the same.
			Name:   "fork_bomb_until_timeout",
			Skill:  map[string]string{"scripts/forks.py": ForkBombPy(600, "time.sleep(600)\n")},
			Args:   Py("forks.py"),
			Limits: runtime.Limits{Pids: 32, Timeout: 12 * time.Second}, // room to start on a loaded machine
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				if c.PidsUnenforced {
					wantBombContained(t, res)
					return
				}
				if c.Rootless {
					if res.Reason != runtime.ReasonTimeout || !strings.Contains(string(res.Stdout), "fork failed after") {
						t.Errorf("reason %s exit %d, want refused forks, then the timeout\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, Clip(res.Stdout), Clip(res.Stderr))
					}
					return
				}
				if res.Reason != runtime.ReasonPids {
					t.Errorf("reason %s exit %d, want pids\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, Clip(res.Stdout), Clip(res.Stderr))
				}
			},
		},
		{
			Name: "memory_hog",
			Skill: map[string]string{"scripts/hog.py": `chunks = []
while True:
    chunks.append(bytearray(8 << 20))
`},
			Args:   Py("hog.py"),
			Limits: runtime.Limits{MemoryBytes: 128 << 20, Timeout: 60 * time.Second},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				if res.Reason != runtime.ReasonOOM || res.Signal != "SIGKILL" {
					t.Errorf("reason %s exit %d signal %q, want oom by SIGKILL\nstderr: %s", res.Reason, res.ExitCode, res.Signal, Clip(res.Stderr))
				}
			},
		},
		{
			// A job whose script reports a SIGKILL that no limit sent is
			// reported as it exited: the exit status alone never makes an
			// oom (memory_hog's kill is told apart by evidence of the
			// memory limit), and its outputs are collected.
			Name:  "killed_without_a_limit",
			Skill: map[string]string{"scripts/killed.sh": "echo kept > kept.txt\nsh -c 'kill -9 $$'\nexit $?\n"},
			Args: func(*CaseEnv) []string {
				return []string{"bash", "/skill/scripts/killed.sh"}
			},
			Limits: runtime.Limits{MemoryBytes: 128 << 20},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 137, runtime.ReasonExit)
				if len(res.Outputs) != 1 || res.Outputs[0].Path != "kept.txt" || string(res.Outputs[0].Data) != "kept\n" {
					t.Errorf("outputs %+v skipped %q, want kept.txt = kept", res.Outputs, res.OutputsSkipped)
				}
			},
		},
		{
			Name: "timeout_evasion",
			Skill: map[string]string{"scripts/evade.py": `import os, signal, sys, time
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
			Args: func(c *CaseEnv) []string {
				return []string{"python3", "/skill/scripts/evade.py", c.Marker}
			},
			Limits: runtime.Limits{Timeout: 12 * time.Second}, // room to start on a loaded machine
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				if res.Reason != runtime.ReasonTimeout || res.Signal != "SIGKILL" {
					t.Errorf("reason %s signal %q, want timeout by SIGKILL", res.Reason, res.Signal)
				}
				if !strings.Contains(string(res.Stdout), "ready") {
					t.Errorf("script did not start: %s %s", res.Stdout, res.Stderr)
				}
				if left := HostProcsWith(c.Marker); len(left) > 0 {
					t.Errorf("processes left on the host: %v", left)
				}
			},
		},
		{
			Name: "timeout_term_delivered",
			Skill: map[string]string{"scripts/term.py": `import signal, sys, time
def on_term(*_):
    print("got TERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("waiting", flush=True)
time.sleep(1000)
`},
			Args:   Py("term.py"),
			Limits: runtime.Limits{Timeout: 12 * time.Second}, // room to start on a loaded machine
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				// The script handles TERM within the grace period and exits 0; the
				// run still ended because of the timeout.
				WantExit(t, res, 0, runtime.ReasonTimeout)
				if string(res.Stdout) != "waiting\ngot TERM\n" {
					t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name:   "output_flood",
			Skill:  map[string]string{"scripts/flood.py": "import sys\nline = 'x' * 1023 + '\\n'\nwhile True:\n    sys.stdout.write(line)\n"},
			Args:   Py("flood.py"),
			Limits: runtime.Limits{StdoutBytes: 64 << 10, Timeout: 60 * time.Second},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				if res.Reason != runtime.ReasonOutputCap || !res.StdoutTruncated || len(res.Stdout) != 64<<10 {
					t.Errorf("reason %s truncated %v len %d, want output_cap, truncated, %d bytes", res.Reason, res.StdoutTruncated, len(res.Stdout), 64<<10)
				}
			},
		},
		{
			Name:   "output_over_cap_then_exit",
			Skill:  map[string]string{"scripts/over.py": "import sys\nsys.stdout.write('y' * 5000)\n"},
			Args:   Py("over.py"),
			Limits: runtime.Limits{StdoutBytes: 4096},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				// Whether the script's exit or our kill came first, the reason
				// is the same.
				if res.Reason != runtime.ReasonOutputCap || !res.StdoutTruncated || string(res.Stdout) != strings.Repeat("y", 4096) {
					t.Errorf("reason %s truncated %v len %d", res.Reason, res.StdoutTruncated, len(res.Stdout))
				}
			},
		},
		{
			Name:   "stderr_flood",
			Skill:  map[string]string{"scripts/eflood.sh": "yes error-line >&2\n"},
			Args:   func(*CaseEnv) []string { return []string{"bash", "/skill/scripts/eflood.sh"} },
			Limits: runtime.Limits{StderrBytes: 16 << 10, Timeout: 60 * time.Second},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				if res.Reason != runtime.ReasonOutputCap || !res.StderrTruncated || len(res.Stderr) != 16<<10 || res.StdoutTruncated {
					t.Errorf("reason %s stderr truncated %v len %d", res.Reason, res.StderrTruncated, len(res.Stderr))
				}
			},
		},
		{
			Name: "network_blocked",
			Skill: map[string]string{"scripts/net.py": `import socket
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
			Args:   Py("net.py"),
			Limits: runtime.Limits{Timeout: 60 * time.Second},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				out := string(res.Stdout)
				if strings.Contains(out, "CONNECTED") || strings.Contains(out, "RESOLVED") || strings.Count(out, "blocked") != 4 {
					t.Errorf("network reachable:\n%s\n%s", out, res.Stderr)
				}
			},
		},
		{
			Name: "host_files_invisible",
			Skill: map[string]string{"scripts/peek.py": `import sys
for p in sys.argv[1:]:
    try:
        print(p, "READ", open(p).read())
    except OSError as e:
        print(p, "denied", type(e).__name__)
`},
			Links: map[string]string{"scripts/link": SecretPath},
			Args: func(c *CaseEnv) []string {
				return []string{"python3", "/skill/scripts/peek.py", c.Secret.Path, "/proc/1/root" + c.Secret.Path, "/skill/scripts/link", "/proc/self/root" + c.Secret.Path}
			},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				NoSecret(t, res, c.Secret.Value)
				if strings.Count(string(res.Stdout), "denied") != 4 {
					t.Errorf("want 4 denials:\n%s", res.Stdout)
				}
			},
		},
		{
			Name:  "host_env_invisible",
			Skill: map[string]string{"scripts/environ.py": "import os\nprint(dict(os.environ))\nprint(open('/proc/1/environ').read())\n"},
			Args:  Py("environ.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				NoSecret(t, res, c.EnvVal, HostEnvName)
			},
		},
		{
			Name: "skill_read_only",
			Skill: map[string]string{"scripts/write.py": `import os
for p in ("/skill/new.txt", "/skill/scripts/write.py", "/etc/passwd", "/usr/bin/new"):
    try:
        with open(p, "a") as f:
            f.write("x")
        print(p, "WRITTEN")
    except OSError as e:
        print(p, "refused", e.errno)
`},
			Args: Py("write.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if strings.Contains(string(res.Stdout), "WRITTEN") || strings.Count(string(res.Stdout), "refused") != 4 {
					t.Errorf("writes outside /work:\n%s", res.Stdout)
				}
			},
		},
		{
			Name:  "no_capabilities",
			Skill: map[string]string{"scripts/caps.py": "for l in open('/proc/self/status'):\n    if l.startswith(('Cap', 'NoNewPrivs', 'Uid', 'Gid')):\n        print(l.strip())\n"},
			Args:  Py("caps.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				out := string(res.Stdout)
				uid := "Uid:\t65534\t65534\t65534\t65534"
				if c.Rootless {
					uid = "Uid:\t0\t0\t0\t0" // gVisor's uid 0: the user on the host, still without capabilities
				}
				for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", uid} {
					if !strings.Contains(out, want) {
						t.Errorf("missing %q in\n%s", want, out)
					}
				}
				if c.Kernel == KernelHost && !strings.Contains(out, "NoNewPrivs:\t1") {
					t.Errorf("no_new_privs not set:\n%s", out)
				}
			},
		},
		{
			Name: "namespace_and_mount_refused",
			Skill: map[string]string{"scripts/ns.py": `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
r = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
print("unshare", r, ctypes.get_errno())
r = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
print("mount", r, ctypes.get_errno())
`},
			Args: Py("ns.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				out := string(res.Stdout)
				// runc: the seccomp profile refuses both with EPERM. gVisor
				// implements namespaces inside its own kernel, so there only the
				// mount (no capability) must fail.
				// A modern gVisor lets the script unshare a user namespace of
				// its own, in which it may then mount a tmpfs: all of it inside
				// gVisor's kernel, with no effect on the host.
				inOwnNS := c.Kernel == KernelGVisor && strings.Contains(out, "unshare 0 0\n")
				if !(strings.Contains(out, "mount -1 1\n") || inOwnNS) || (c.Kernel == KernelHost && !strings.Contains(out, "unshare -1 1\n")) {
					t.Errorf("want EPERM:\n%s%s", out, res.Stderr)
				}
			},
		},
		{
			Name: "inputs_and_outputs",
			Skill: map[string]string{"scripts/io.py": `import os
print(open("data.csv").read(), end="")
print(oct(os.stat("run.sh").st_mode & 0o777))
os.makedirs("outputs/sub", exist_ok=True)
open("outputs/result.txt", "w").write("result\n")
open("outputs/sub/nested.txt", "w").write("nested\n")
os.symlink("/etc/passwd", "outputs/passwd-link")
os.mkfifo("outputs/fifo")
`},
			Files: []runtime.InputFile{
				{Name: "data.csv", Data: []byte("a,b\n1,2\n")},
				{Name: "run.sh", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
			},
			Args: Py("io.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
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
				if !strings.Contains(sk, "passwd-link: symlink") || (c.Kernel == KernelHost && !strings.Contains(sk, "fifo: fifo")) {
					t.Errorf("skipped %q", res.OutputsSkipped)
				}
			},
		},
		{
			Name: "directory_inputs_round_trip",
			Skill: map[string]string{"scripts/tree.py": `import os
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
			Files: []runtime.InputFile{
				{Name: "unpacked", Kind: runtime.InputDir},
				{Name: "unpacked/[Content_Types].xml", Data: []byte("<Types/>")},
				{Name: "unpacked/ppt/presentation.xml", Data: []byte("<p/>")},
				{Name: "unpacked/ppt/slides/slide1.xml", Data: []byte("<slide1/>"), Mode: 0o600},
				{Name: "unpacked/ppt/empty", Kind: runtime.InputDir, Mode: 0o750},
				{Name: "unpacked/link", Kind: runtime.InputSymlink, Target: "../../etc/passwd"},
			},
			Args: Py("tree.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
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
			Name: "hostile_outputs_not_followed",
			Skill: map[string]string{"scripts/hostile.py": `import os, socket
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
			Args: Py("hostile.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
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
				if c.Kernel == KernelHost && (!strings.Contains(sk, "fifo: fifo") || !strings.Contains(sk, "sock: socket")) {
					t.Errorf("skipped %q lacks the fifo and the socket", res.OutputsSkipped)
				}
			},
		},
		{
			Name:  "five_thousand_outputs",
			Skill: map[string]string{"scripts/many.py": "import os\nfor d in range(50):\n    os.makedirs(f'parts/p{d:02}', exist_ok=True)\n    for f in range(100):\n        open(f'parts/p{d:02}/{f:03}.xml', 'w').write(f'<x n=\"{d}.{f}\"/>')\n"},
			Args:  Py("many.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if len(res.Outputs) != 5000 || res.OutputsTruncated || len(res.OutputsSkipped) != 0 {
					t.Fatalf("%d outputs, truncated %v, skipped %q", len(res.Outputs), res.OutputsTruncated, res.OutputsSkipped)
				}
				if o := res.Outputs[4999]; o.Path != "parts/p49/099.xml" || string(o.Data) != `<x n="49.99"/>` {
					t.Errorf("last output %s=%q", o.Path, o.Data)
				}
			},
		},
		CapCase(runtime.CapOutputFiles, runtime.Limits{OutputFiles: 2}, 2, 2, 1000+1),
		CapCase(runtime.CapOutputBytes, runtime.Limits{OutputBytes: 10}, 3, 1, 1000),
		CapCase(runtime.CapOutputFileBytes, runtime.Limits{OutputFileBytes: 100}, 3, 1, 1000),
		{
			Name: "localhost_server",
			Skill: map[string]string{"scripts/serve.py": `import http.server, socket, threading, urllib.request
print("resolves", socket.gethostbyname("localhost"))
srv = http.server.HTTPServer(("localhost", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
open("page.txt", "w").write("served from the sandbox")
print(urllib.request.urlopen("http://localhost:%d/page.txt" % srv.server_address[1], timeout=20).read().decode())
`},
			Args: Py("serve.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if string(res.Stdout) != "resolves 127.0.0.1\nserved from the sandbox\n" {
					t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name:  "loopback_up_from_shell",
			Skill: map[string]string{"scripts/lo.sh": "getent hosts localhost | awk '{print $2}'\n(echo hi > /dev/tcp/127.0.0.1/9) 2>&1 | tail -n 1 | sed 's/.*: //'\n(echo x >> /etc/hosts) 2>/dev/null && echo WRITABLE\nexit 0\n"},
			Args: func(*CaseEnv) []string {
				return []string{"bash", "/skill/scripts/lo.sh"}
			},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				// Refused (nothing listens), not unreachable: lo is up; and
				// the hosts file is read-only.
				if out := string(res.Stdout); out != "localhost\nConnection refused\n" {
					t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name: "module_path_from_skill_root",
			Skill: map[string]string{
				"scripts/__init__.py": "",
				"scripts/utils.py":    "def greet(): return 'from scripts.utils'\n",
				"scripts/sibling.py":  "NAME = 'sibling'\n",
				"scripts/main.py":     "from scripts.utils import greet\nimport sibling\nprint(greet(), sibling.NAME)\n",
			},
			Args: Py("main.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if string(res.Stdout) != "from scripts.utils sibling\n" {
					t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
				}
			},
		},
		{
			Name:   "workdir_size_capped",
			Skill:  map[string]string{"scripts/fill.py": "import errno\ntry:\n    open('big', 'wb').write(b'x' * (8 << 20))\n    print('WROTE')\nexcept OSError as e:\n    print('full', errno.errorcode[e.errno])\n"},
			Args:   Py("fill.py"),
			Limits: runtime.Limits{WorkdirBytes: 4 << 20},
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if string(res.Stdout) != "full ENOSPC\n" {
					t.Errorf("workdir not capped: %q %s", res.Stdout, res.Stderr)
				}
			},
		},
	}
}
