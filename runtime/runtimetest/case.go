package runtimetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// Kernels a script can talk to (CaseEnv.Kernel).
const (
	// KernelGVisor: gVisor's sentry (runsc, containerd with runsc, pods
	// under the RuntimeClass gvisor).
	KernelGVisor = "runsc"
	// KernelHost: the host's kernel (runc).
	KernelHost = "runc"
)

// Case is one row of the table: a skill, a job made of it, and a check of
// the result.
type Case struct {
	Name   string
	Skill  map[string]string // files of the skill dir
	Links  map[string]string // symlinks in the skill dir: name -> target (SecretPath: the host secret's path)
	Args   func(c *CaseEnv) []string
	Env    []string
	Files  []runtime.InputFile
	Stdin  string
	Limits runtime.Limits
	Check  func(t *testing.T, c *CaseEnv, res *runtime.Result)
}

// SecretPath, as a link target of Case.Links, stands for the host
// secret's path.
const SecretPath = "SECRET_PATH"

// CaseEnv is what a case's args and checks can refer to.
type CaseEnv struct {
	Backend string
	Kernel  string // KernelGVisor or KernelHost: what the script talks to
	Secret  HostSecret
	EnvVal  string // the value of HostEnvName in the test process
	Marker  string // a fresh word a case may put in its processes' argv
	// Rootless: an ordinary user's gVisor sandbox (TestRunRootless).
	Rootless bool
	// PidsUnenforced: the backend holds no per-run pids limit (kubernetes:
	// a PodSpec has none; the kubelet's podPidsLimit is the node's). A
	// fork bomb must then end at another limit (memory, the timeout) or
	// by itself, and its result must say that nothing enforced pids.
	PidsUnenforced bool
}

// Py is the argv of the python script scripts/script of the skill.
func Py(script string) func(*CaseEnv) []string {
	return func(*CaseEnv) []string { return []string{"python3", "/skill/scripts/" + script} }
}

// ForkBombPy is a python script that forks children sleeping childSleep
// seconds until a fork is refused, says so, and then runs then.
func ForkBombPy(childSleep int, then string) string {
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

// wantBombContained checks a fork bomb on a backend with no per-run pids
// limit (CaseEnv.PidsUnenforced): it ended at the memory limit, at the
// timeout, or by itself (a bash bomb's script exits while its forks
// spin; they go with the sandbox), and the result says that nothing
// enforced pids. That nothing is left of it after the run is the
// backend's own check (Table.After).
func wantBombContained(t *testing.T, res *runtime.Result) {
	t.Helper()
	switch res.Reason {
	case runtime.ReasonOOM, runtime.ReasonTimeout, runtime.ReasonExit:
	default:
		t.Errorf("reason %s exit %d, want oom, timeout or exit (no pids limit here)\nstdout: %s\nstderr: %s", res.Reason, res.ExitCode, Clip(res.Stdout), Clip(res.Stderr))
	}
	if by := res.LimitsEnforcedBy["pids"]; by != runtime.EnforcedByNone {
		t.Errorf("pids enforced by %q, want %q: the backend has no per-run pids limit", by, runtime.EnforcedByNone)
	}
}

// CapCase writes four files (4, 4, 1000 and 1 bytes) and expects the cap
// named by its name to leave some out, saying so.
func CapCase(capName string, lim runtime.Limits, collected, omitted int, omittedBytes int64) Case {
	return Case{
		Name:   "cap_" + capName,
		Skill:  map[string]string{"scripts/caps.py": "open('a', 'w').write('aaaa')\nopen('b', 'w').write('bbbb')\nopen('c', 'w').write('c' * 1000)\nopen('d', 'w').write('d')\n"},
		Args:   Py("caps.py"),
		Limits: lim,
		Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
			WantExit(t, res, 0, runtime.ReasonExit)
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
