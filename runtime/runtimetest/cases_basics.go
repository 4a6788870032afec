package runtimetest

import (
	"os"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// The basic cases: arguments and exit codes of each interpreter, how a warm run
// ends, the streams apart, stdin and the environment, and the kernel a script
// sees.
func basicCases() []Case {
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
	}
}
