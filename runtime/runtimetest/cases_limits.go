package runtimetest

import (
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// The limit cases: pids (fork bombs, alone and with memory or a timeout),
// memory, the wall-clock timeout and its evasions, and the stream caps.
func limitCases() []Case {
	return []Case{
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
	}
}
