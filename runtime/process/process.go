// Package process is the host side of a sandbox that every backend shares,
// whatever starts its processes (an OCI CLI in runtime/ocicli, a containerd
// shim in runtime/containerd): the stdio pipes and their caps (Streams), the
// first processes of warm sandboxes and the message that hands a job to one,
// the cgroup (limits, counters, the end-of-run reason they decide,
// teardown), the egress plumbing, the watchdogs that outlive a dying daemon,
// and the sweep of runs a dead process left behind (SweepRuns). A backend
// only says how a process is started, waited for and killed; the rules
// around that are here, once.
//
// A warm Python sandbox's first process is the supervisor (supervisor.py,
// embedded): it imports common modules, reads one job from its stdin and
// runs the script as __main__, then exits as the interpreter would but
// without tearing down every module, which costs about 10 ms in gVisor.
// Other interpreters get a holder process, and the job is exec'd into the
// sandbox with the same OCI process a cold run has.
//
// A job's watchdog (watchdog.go) is the skillbox binary again, in a session
// of its own, holding the job's cgroup and deadline: if the daemon dies
// first, it kills what is left at the deadline, so no run outlives its limit
// without a daemon. A containerd task lives in its shim, also while it waits
// in the pool, so each containerd sandbox gets a sandbox watchdog instead
// (StartSandboxWatchdog), which sweeps the sandbox once the daemon is gone.
package process

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// Timing of the stop sequence. No timing here is a guarantee the tests
// depend on; they only bound how long a stuck runtime can hold a run.
const (
	KillRetry       = 500 * time.Millisecond
	KillWait        = 10 * time.Second
	drainWait       = 5 * time.Second
	TeardownTimeout = 60 * time.Second
)

// removeCgroupRetry retries for a while as the cgroup's last processes exit.
func removeCgroupRetry(ctx context.Context, p string) error {
	giveUp := time.After(KillWait)
	for {
		err := removeCgroup(p)
		if err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-giveUp:
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
