// Package process is the host side of a sandbox that every backend shares,
// whatever starts its processes (an OCI CLI in runtime/ocicli, a containerd
// shim in runtime/containerd): the stdio pipes and their caps (Streams),
// the first processes of warm sandboxes (the python supervisor, the holder)
// and the message that hands a job to one, the cgroup (limits, counters,
// the end-of-run reason they decide, teardown), the egress plumbing, the
// watchdogs that outlive a dying daemon, and the sweep of runs a dead
// process left behind. A backend only says how a process is started,
// waited for and killed; the rules around that are here, once.
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
