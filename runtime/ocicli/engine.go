// Package ocicli holds the backends that drive an OCI runtime's CLI: runsc
// (gVisor, the default, see runtime.PinnedRunscPath) and runc. Both go
// through one run driver (engine) whose sandboxes implement
// runtime.Lifecycle on top of `<cli> run`, `exec`, `kill`, `delete`, `state`
// and `list`; their bundles come from runtime/oci and their cgroups,
// streams, watchdogs and sweep from runtime/process. They register with
// runtime (runtime.New("runsc"), "runc") when the package is imported.
//
// A warm runsc sandbox starts with `runsc run --detach`, so no runsc process
// waits beside each idle sandbox; its first process writes the exit status
// on a pipe handed in with --pass-fd. A session sandbox (session.go) has
// runtime/supervisor as its first process. A rootless sandbox has no cgroup,
// so memwatch.go watches its memory (the sentry's memory file and its
// anonymous memory) and kills it above the limit, failing closed.
package ocicli

import (
	"context"
	"os"
	"os/exec"
	goruntime "runtime"
	"sync"
	"syscall"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/process"
	"golang.org/x/sys/unix"
)

// engine is the run driver runc and runsc share; its sandbox implements
// the lifecycle (runtime.Lifecycle) on top of their CLIs. A sandbox is:
//
//	create   oci.NewSandboxBundle: run dir (locked before it is visible: the run's
//	         record for Sweep), empty workdir tmpfs, hosts file; the cgroup
//	         (runsc pre-creates the cgroups it reads)
//	start    warm only: config.json with skillbox's own first process (the
//	         python supervisor, or a holder), `<cli> run` in the background,
//	         ready once that process says so on its stdout
//	deliver  inputs into the workdir; cold: config.json with the job and
//	         `<cli> run` in the foreground; python: the job down the
//	         supervisor's stdin; exec: `<cli> exec --process` of the job.
//	         Its stdout/stderr are our pipes, drained concurrently and capped
//	wait     exit, wall-clock timeout, output cap or ctx cancel; the last three
//	         stop the container (TERM to all, grace, KILL to all, delete);
//	         cgroup counters (OOM kills, refused forks) read before delete;
//	         what the script created or changed, read from the host side of
//	         /work
//	destroy  delete --force, kill the CLIs' process groups, remove the cgroup,
//	         unmount the workdir and remove the run dir, last, releasing its
//	         lock (fresh context, also on panic and cancel)
//
// `run` rather than create+start: the runtime CLI is then the parent of the
// container (runc) or sandbox (runsc) and so the only process that can learn
// its exit status; runsc in particular loses it if `wait` attaches after the
// script ended. That is also why the python supervisor runs the script in
// the sandbox's first process: its exit status is the `run` CLI's. A
// pre-booted runsc sandbox is the exception: an attached CLI per idle
// sandbox is a Go process's memory for nothing, so it starts with `run
// --detach` and its first process, a shell around the supervisor, writes
// the script's exit status on a pipe handed in with --pass-fd.
type engine struct {
	name   string
	cli    *ociCLI
	runDir string
	log    runtime.Logger
	grace  time.Duration // between TERM and KILL on timeout
	d      driver
	// rootless: sandboxes of an ordinary user (runsc --rootless): no
	// network, no cgroup, memory watched by skillbox (memoryWatch).
	rootless bool
	// cgParent is where runs' cgroups are made (oci.CgroupParent, or a
	// rootless user's delegated subtree when delegated).
	cgParent  string
	delegated bool
	// platform is runsc's --platform ("" for runc), which a checkpoint
	// records.
	platform string

	live     process.Live[*sandbox]        // created and not yet destroyed
	sessions process.Live[*sessionSandbox] // session sandboxes, likewise
	mu       sync.Mutex
	digests  map[string]string // supervisorDigest's, by path, size, mtime
}

// driver is what differs between the CLIs.
type driver interface {
	// specOptions are the backend's choices for BuildSpec.
	specOptions(job runtime.Job) oci.SpecOptions
	// setupCgroup runs after the bundle is made and before the container
	// starts.
	setupCgroup(cgPath string, lim runtime.Limits) error
	// runCommand returns extra global flags and the arguments that run the
	// bundle in the foreground.
	runCommand(network bool, b *oci.Bundle) (global, args []string)
	// detachedRunCommand returns, when the CLI can, the flags and arguments
	// that start the bundle and return once it runs, handing the CLI's
	// descriptor 3 to the container's first process as statusFD; ok is
	// false for a CLI that has to stay attached.
	detachedRunCommand(network bool, b *oci.Bundle, statusFD int) (global, args []string, ok bool)
	// execCommand returns the global flags and arguments that exec the
	// process in processFile into the bundle's running container.
	execCommand(b *oci.Bundle, processFile string) (global, args []string)
	// enforcement names what holds each limit (Result.LimitsEnforcedBy).
	enforcement() map[string]string
	// setupError tells a failure of the CLI itself (the container never ran
	// the script) apart from the script's own exit code.
	setupError(b *oci.Bundle, code int) error
}

// startTied starts the runtime CLI's run command so that it dies with us,
// and returns a channel closed once it has exited and been waited for.
//
// The CLI runs in its own process group, so a kill -9 of the daemon would
// leave it running: it could go on to create the container after a new
// daemon's Sweep, finding the run dir unlocked, had looked for one. With
// Pdeathsig the kernel SIGKILLs it in the same exit that drops the run
// dir's lock. (What it already made, a container or sandbox, lives on
// without it; that is Sweep's.) Pdeathsig fires when the forking thread
// ends, not the process (go.dev/issue/27505), so the fork happens on a
// thread locked to one goroutine for the CLI's whole life: no other
// goroutine can end that thread under it.
func startTied(cmd *exec.Cmd) (<-chan struct{}, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// exitStatus turns the CLI's exit into (code, signal name). Both CLIs exit
// with the container's code, or 128+n when it was killed by signal n; that
// encoding is ambiguous with a script that itself exits 129..159, which is
// why the signal is reported by name next to the code rather than instead.
func exitStatus(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return -1, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		// The CLI itself was killed (by our last-resort group kill).
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	code := ps.ExitCode()
	return code, process.ExitSignal(code)
}

// stop brings the container down. Graceful (timeout) sends TERM to every
// process first and waits the grace period; then KILL to every process,
// repeated because a kill can race the container's start; then delete
// --force (which for runsc kills the sandbox); then the CLI's process group.
func (e *engine) stop(id string, cmd *exec.Cmd, exited <-chan struct{}, graceful bool) {
	ctx, cancel := context.WithTimeout(context.Background(), process.TeardownTimeout)
	defer cancel()
	if graceful {
		if err := e.cli.kill(ctx, id, "TERM", true); err != nil {
			e.log.Debug("kill TERM failed", "id", id, "error", err)
		}
		select {
		case <-exited:
			return
		case <-time.After(e.grace):
		}
	}
	deadline := time.After(process.KillWait)
	for {
		if err := e.cli.kill(ctx, id, "KILL", true); err != nil {
			e.log.Debug("kill KILL failed", "id", id, "error", err)
		}
		select {
		case <-exited:
			return
		case <-deadline:
		case <-time.After(process.KillRetry):
			continue
		}
		break
	}
	e.log.Warn("container did not stop on KILL; deleting it", "id", id)
	if err := e.cli.delete(ctx, id); err != nil {
		e.log.Warn("delete --force failed", "id", id, "error", err)
	}
	select {
	case <-exited:
		return
	case <-time.After(process.KillWait):
	}
	e.log.Warn("runtime did not exit; killing its process group", "id", id)
	_ = killGroup(cmd)
	select {
	case <-exited:
	case <-time.After(process.KillWait):
	}
}
