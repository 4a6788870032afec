package containerd

import (
	"context"
	"fmt"
	"os"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/process"
)

// A task lives in its shim, not in the daemon: it outlives a daemon that
// dies, also while it waits in the pool for a job. So every sandbox of
// this backend has a sandbox watchdog (process.StartSandboxWatchdog) from
// before its task is made: once the daemon is gone it deletes the task,
// the container with its snapshot and the lease, kills the shim, and
// removes the cgroup and run dir, at once for an idle sandbox and at the
// job's deadline for a busy one.

// The watchdog is this binary started again; this package is the one that
// knows how to delete its containers, so it dispatches on the name.
func init() {
	if len(os.Args) > 0 && os.Args[0] == process.SandboxWatchdogArg0 {
		os.Exit(process.RunSandboxWatchdog(os.Args[1:], os.Stdin, os.Stderr, watchdogOps))
	}
}

// watchdogArgs are what a sandbox's watchdog needs to reach its container.
func (c *Containerd) watchdogArgs() []string { return []string{c.address, c.namespace} }

// watchdogOps connects to the containerd at the address and namespace of
// args (watchdogArgs) for a watchdog whose daemon is gone.
func watchdogOps(ctx context.Context, args []string, log runtime.Logger) (process.SweepOps, error) {
	if len(args) != 2 {
		return process.SweepOps{}, fmt.Errorf("want containerd address and namespace, got %q", args)
	}
	c := &Containerd{address: args[0], namespace: args[1], log: runtime.NamedLogger(log, "runtime.containerd")}
	cl, err := c.connect(ctx)
	if err != nil {
		return process.SweepOps{}, err
	}
	return c.sweepOps(cl), nil
}
