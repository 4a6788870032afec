package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// engine is the run driver runc and runsc share. A run is:
//
//	prepare  PrepareBundle: run dir (locked before it is visible: the run's
//	         record for Sweep), workdir tmpfs with inputs, config.json
//	cgroup   driver.setupCgroup (runsc pre-creates the cgroups it reads)
//	run      `<cli> run` in the foreground with our pipes as the container's
//	         stdio, drained concurrently and capped
//	watch    exit, wall-clock timeout, output cap or ctx cancel; the last three
//	         stop the container (TERM to all, grace, KILL to all, delete)
//	explain  cgroup counters (OOM kills, refused forks) read before delete
//	collect  what the script created or changed, read from the host side of
//	         the stopped container's /work
//	teardown delete --force, kill the CLI's process group, remove the cgroup,
//	         unmount the workdir and remove the run dir, last, releasing its
//	         lock (fresh context, also on panic and cancel)
//
// `run` rather than create+start: the runtime CLI is then the parent of the
// container (runc) or sandbox (runsc) and so the only process that can learn
// its exit status; runsc in particular loses it if `wait` attaches after the
// script ended. A warm pool would split this at "run" into create (boot the
// sandbox ahead) and start, and reap the sandbox as a child subreaper.
type engine struct {
	name   string
	cli    *ociCLI
	runDir string
	log    Logger
	grace  time.Duration // between TERM and KILL on timeout
	d      driver
}

// driver is what differs between the CLIs.
type driver interface {
	// specOptions are the backend's choices for BuildSpec.
	specOptions(job Job) SpecOptions
	// setupCgroup runs after the bundle is made and before the container
	// starts.
	setupCgroup(b *Bundle) error
	// runCommand returns extra global flags and the arguments that run the
	// bundle in the foreground.
	runCommand(job Job, b *Bundle) (global, args []string)
	// setupError tells a failure of the CLI itself (the container never ran
	// the script) apart from the script's own exit code.
	setupError(b *Bundle, code int) error
}

// Timing of the stop sequence. No timing here is a guarantee the tests
// depend on; they only bound how long a stuck runtime can hold a run.
const (
	defaultGrace    = time.Second
	killRetry       = 500 * time.Millisecond
	killWait        = 10 * time.Second
	drainWait       = 5 * time.Second
	teardownTimeout = 60 * time.Second
)

// IDPrefix starts the ids of the runs the daemon makes; Sweep only touches
// containers whose id has it.
const IDPrefix = "skillbox-"

// Default directories.
const (
	DefaultStateBase = "/run/skillbox"
	DefaultRunDir    = "/run/skillbox/runs"
)

func graceOr(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return defaultGrace
}

// namedLogger returns an hclog logger named name from opts, or a null logger.
func namedLogger(l Logger, name string) Logger {
	switch lg := l.(type) {
	case nil:
		return hclog.NewNullLogger()
	case hclog.Logger:
		return lg.Named(name)
	default:
		return l
	}
}

func (e *engine) run(ctx context.Context, job Job) (res *Result, err error) {
	if _, err := e.cli.lookup(); err != nil {
		return nil, err
	}
	version, err := e.cli.Version(ctx)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("run %s not started: %w", job.ID, err)
	}
	job.Limits = job.Limits.WithDefaults()
	lim := job.Limits

	b, err := PrepareBundle(job, e.runDir, e.d.specOptions(job))
	if err != nil {
		return nil, err
	}
	cgPath := b.Spec.Linux.CgroupsPath
	var cmd *exec.Cmd
	var wd *watchdog
	// lifeCtx outlives ctx on purpose: the run command must stay until we
	// have stopped the container and read its counters; teardown cancels it.
	lifeCtx, lifeCancel := context.WithCancel(context.Background())
	defer func() {
		p := recover()
		terr := e.teardown(job.ID, b, cgPath, cmd, lifeCancel)
		// Released only now: until the teardown is over, a daemon that dies
		// leaves the run's deadline to its watchdog.
		wd.done()
		if terr != nil {
			e.log.Error("teardown failed", "id", job.ID, "error", terr)
			if err == nil && p == nil {
				err = fmt.Errorf("teardown of run %s: %w", job.ID, terr)
			}
		}
		if p != nil {
			panic(p)
		}
	}()
	if err := e.d.setupCgroup(b); err != nil {
		return nil, err
	}

	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	defer stdoutR.Close()
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutW.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	defer stderrR.Close()
	var stdinR, stdinW *os.File
	if len(job.Stdin) > 0 {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			stdoutW.Close()
			stderrW.Close()
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
		defer stdinW.Close()
	}

	global, args := e.d.runCommand(job, b)
	cmd, err = e.cli.command(lifeCtx, global, args...)
	if err != nil {
		stdoutW.Close()
		stderrW.Close()
		if stdinR != nil {
			stdinR.Close()
		}
		return nil, err
	}
	cmd.Dir = b.Dir
	cmd.Stdout = stdoutW
	cmd.Stderr = stderrW
	if stdinR != nil {
		cmd.Stdin = stdinR
	}
	outCap := newCapture(lim.StdoutBytes, job.Stdout)
	errCap := newCapture(lim.StderrBytes, job.Stderr)

	e.log.Debug("run starting", "id", job.ID, "bundle", b.Dir, "args", cmd.Args)
	started := time.Now()
	// The deadline holds without us: see watchdog.go.
	if wd, err = startWatchdog(job.ID, cgPath, started.Add(lim.Timeout+e.grace+watchdogSlack)); err != nil {
		stdoutW.Close()
		stderrW.Close()
		if stdinR != nil {
			stdinR.Close()
		}
		cmd = nil
		return nil, err
	}
	exited, startErr := startTied(cmd)
	// The child has its copies; ours must go or the drains never see EOF.
	stdoutW.Close()
	stderrW.Close()
	if stdinR != nil {
		stdinR.Close()
	}
	if startErr != nil {
		cmd = nil
		return nil, fmt.Errorf("start %s: %w", e.name, startErr)
	}
	go outCap.drain(stdoutR)
	go errCap.drain(stderrR)
	if stdinW != nil {
		go func() {
			// EPIPE when the script does not read it all is fine.
			_, _ = stdinW.Write(job.Stdin)
			_ = stdinW.Close()
		}()
	}

	reason := ReasonExit
	timer := time.NewTimer(lim.Timeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		reason = ReasonTimeout
		e.stop(job.ID, cmd, exited, true)
	case <-outCap.over:
		reason = ReasonOutputCap
		e.stop(job.ID, cmd, exited, false)
	case <-errCap.over:
		reason = ReasonOutputCap
		e.stop(job.ID, cmd, exited, false)
	case <-ctx.Done():
		reason = ReasonKilled
		e.stop(job.ID, cmd, exited, false)
	}
	select {
	case <-exited:
	default:
		return nil, fmt.Errorf("run %s: %s did not exit after the container was killed", job.ID, e.name)
	}
	duration := time.Since(started)

	// The container's processes died with its pid namespace (runc) or its
	// sandbox (runsc), so the pipes reach EOF; the deadline is for anything
	// else that kept a write end.
	for _, d := range []struct {
		c *capture
		f *os.File
	}{{outCap, stdoutR}, {errCap, stderrR}} {
		select {
		case <-d.c.done:
		case <-time.After(drainWait):
			stopDraining(d.f)
			<-d.c.done
		}
	}

	// Checked once the drains are done, so the rule does not depend on timing.
	if reason == ReasonExit && (isClosed(outCap.over) || isClosed(errCap.over)) {
		// The script went over the cap and ended before our kill landed:
		// the same run as one we killed, so the same reason, whatever won
		// the race.
		reason = ReasonOutputCap
	}
	code, signal := exitStatus(cmd.ProcessState)
	ev := readCgroupEvents(cgPath)
	// A run that we stopped, or that ran into its memory or pids limit,
	// did run; the CLI may still log errors about how its sandbox ended.
	if reason == ReasonExit && ev.OOMKills == 0 && ev.PidsMax == 0 {
		if serr := e.d.setupError(b, code); serr != nil {
			return nil, serr
		}
	}
	reason = finalReason(reason, ev)

	res = &Result{
		ExitCode:       code,
		Signal:         signal,
		Reason:         reason,
		Duration:       duration,
		Runtime:        e.name,
		RuntimeVersion: version,
	}
	res.Stdout, res.StdoutTruncated = outCap.result()
	res.Stderr, res.StderrTruncated = errCap.result()
	outs, oerr := b.CollectOutputs()
	if oerr != nil {
		// The run happened; what it wrote cannot be read back. Say so in
		// the result rather than fail the run or return nothing silently.
		e.log.Warn("collecting outputs failed", "id", job.ID, "error", oerr)
		outs = &Outputs{Skipped: []string{"outputs not collected: " + oerr.Error()}}
	}
	outs.apply(res)
	e.log.Debug("run finished", "id", job.ID, "reason", reason, "exit_code", code, "signal", signal,
		"duration", duration, "oom_kills", ev.OOMKills, "pids_max_events", ev.PidsMax,
		"stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr), "outputs", len(res.Outputs),
		"outputs_truncated_by", res.OutputsTruncatedBy)
	return res, nil
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
	if code > 128 && code < 128+65 {
		if name := unix.SignalName(syscall.Signal(code - 128)); name != "" {
			return code, name
		}
	}
	return code, ""
}

// stop brings the container down. Graceful (timeout) sends TERM to every
// process first and waits the grace period; then KILL to every process,
// repeated because a kill can race the container's start; then delete
// --force (which for runsc kills the sandbox); then the CLI's process group.
func (e *engine) stop(id string, cmd *exec.Cmd, exited <-chan struct{}, graceful bool) {
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
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
	deadline := time.After(killWait)
	for {
		if err := e.cli.kill(ctx, id, "KILL", true); err != nil {
			e.log.Debug("kill KILL failed", "id", id, "error", err)
		}
		select {
		case <-exited:
			return
		case <-deadline:
		case <-time.After(killRetry):
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
	case <-time.After(killWait):
	}
	e.log.Warn("runtime did not exit; killing its process group", "id", id)
	_ = killGroup(cmd)
	select {
	case <-exited:
	case <-time.After(killWait):
	}
}

// teardown removes everything a run made. It uses its own context so that a
// cancelled caller cannot leave a container, mount or cgroup behind.
func (e *engine) teardown(id string, b *Bundle, cgPath string, cmd *exec.Cmd, lifeCancel context.CancelFunc) error {
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	var errs []error
	if err := e.cli.delete(ctx, id); err != nil {
		errs = append(errs, err)
	}
	lifeCancel()
	if cmd != nil && cmd.Process != nil {
		// Anything the CLI forked that is still in its group (a runsc gofer
		// or sandbox that outlived a crash of the CLI).
		_ = killGroup(cmd)
	}
	if err := removeCgroupRetry(ctx, cgPath); err != nil {
		errs = append(errs, err)
	}
	if err := b.Remove(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeCgroupRetry retries for a while as the cgroup's last processes exit.
func removeCgroupRetry(ctx context.Context, p string) error {
	giveUp := time.After(killWait)
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
