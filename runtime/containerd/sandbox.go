package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/runtime/process"
)

// A sandbox is one container of the backend through the lifecycle:
//
//	create   the bundle (run dir locked, workdir tmpfs, hosts file), the
//	         cgroup runsc joins (gVisor), and the run's lease
//	start    warm only: the container with skillbox's first process (the
//	         python supervisor or a holder) and its task, ready once that
//	         process says so on its stdout
//	deliver  inputs into the workdir; cold: the container with the job
//	         as its process, and its task; python: the job down the
//	         supervisor's stdin; exec: the job exec'd into the task
//	wait     exit, timeout, output cap or ctx: the last three kill every
//	         process of the task (TERM, grace, KILL); the drains, the end
//	         rules and the outputs are package runtime's
//	destroy  task and container deleted, lease, cgroup, workdir and run
//	         dir removed (fresh context)
type sandbox struct {
	c     *Containerd
	cl    *containerd.Client
	spec  runtime.SandboxSpec
	b     *oci.Bundle
	cg    string
	stage process.Stage
	// opts are the backend's spec options with this sandbox's egress
	// (eg, nil without one) filled in.
	opts oci.SpecOptions
	eg   *egress.Egress

	version string
	ctr     containerd.Container
	task    containerd.Task
	// The first process's stdio (warm): its stdin's write end, its streams.
	initIn      *os.File
	initStdin   *eofReader
	initStreams *process.Streams
	initExit    <-chan containerd.ExitStatus
	// wd is the sandbox's watchdog (watchdog.go): from Start when warm,
	// from Deliver when cold.
	wd *process.Watchdog

	// The job.
	proc    containerd.Process
	exit    <-chan containerd.ExitStatus
	streams *process.Streams
	lim     runtime.Limits
	started time.Time

	done       chan struct{} // closed at Destroy
	lifeCtx    context.Context
	lifeCancel context.CancelFunc
	destroyed  process.DestroyOnce
}

// execID is the id of the job exec'd into a BootExec sandbox.
const execID = "job"

var _ runtime.Sandbox = (*sandbox)(nil)

// Create makes a sandbox (see runtime.Lifecycle).
func (c *Containerd) Create(ctx context.Context, spec runtime.SandboxSpec) (_ runtime.Sandbox, err error) {
	version, err := c.Version(ctx)
	if err != nil {
		return nil, err
	}
	if spec, err = runtime.CheckSpec(ctx, spec, runtime.LifecycleBoots...); err != nil {
		return nil, err
	}
	cl, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	b, err := oci.NewSandboxBundle(spec, c.opts.RunDir, c.specOpts)
	if err != nil {
		return nil, err
	}
	s := &sandbox{c: c, cl: cl, spec: spec, b: b, cg: oci.CgroupParent + "/" + spec.ID, version: version, done: make(chan struct{}), opts: c.specOpts}
	s.lifeCtx, s.lifeCancel = context.WithCancel(s.ctx(context.Background()))
	c.live.Add(s)
	defer func() {
		if err != nil {
			_ = s.Destroy(ctx)
		}
	}()
	if _, err := cl.LeasesService().Create(c.ctx(ctx), leases.WithID(spec.ID), leases.WithExpiration(leaseExpiry),
		leases.WithLabels(map[string]string{LabelRunDir: b.Dir})); err != nil {
		return nil, fmt.Errorf("create containerd lease %s: %w", spec.ID, err)
	}
	if c.gvisor {
		// runsc joins an existing cgroup and leaves it (and so its OOM
		// and pids counters) in place; runc makes it from the spec.
		if err := process.CreateRunscCgroup(s.cg, spec.Limits, c.platform); err != nil {
			return nil, err
		}
	}
	if s.eg, err = process.SetUp(ctx, spec, b, s.cg, &s.opts, c.log); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *sandbox) ID() string { return s.spec.ID }

// ctx is the namespace and the run's lease.
func (s *sandbox) ctx(ctx context.Context) context.Context {
	return leases.WithLease(s.c.ctx(ctx), s.spec.ID)
}

// newTask makes the container with job's spec and its task with the given
// stdio, and waits for its exit before it starts.
func (s *sandbox) newTask(ctx context.Context, job runtime.Job, stdin io.Reader, st *process.Streams) (<-chan containerd.ExitStatus, error) {
	if err := s.b.SpecFor(job, s.opts); err != nil {
		return nil, err
	}
	ropts, err := s.c.runtimeOptions(job.Sandbox.Network || job.Sandbox.Egress != nil)
	if err != nil {
		return nil, err
	}
	ctx = s.ctx(ctx)
	ctr, err := s.newContainer(ctx, ropts)
	if err != nil {
		return nil, fmt.Errorf("create containerd container %s: %w", s.spec.ID, err)
	}
	s.ctr = ctr
	t, err := ctr.NewTask(ctx, s.ioCreator(stdin, st))
	if err != nil {
		return nil, s.handlerError("create task", err)
	}
	s.task = t
	// The exit is waited for in the sandbox's own context: containerd
	// ends a wait whose ctx is done with an unknown status, and the ctx
	// of a pool's boot ends long before its job.
	exit, err := t.Wait(s.lifeCtx)
	if err != nil {
		return nil, fmt.Errorf("wait for task %s: %w", s.spec.ID, err)
	}
	return exit, nil
}

// handlerError explains a task that could not be made or started; a
// handler containerd does not have is ErrUnavailable.
func (s *sandbox) handlerError(what string, err error) error {
	if errdefs.IsNotFound(err) || errors.Is(err, os.ErrNotExist) {
		return errkind.Errorf(runtime.ErrUnavailable, "containerd %s %s with handler %s: %v (is %s on containerd's PATH?)", what, s.spec.ID, s.c.handler, err, RunscShim)
	}
	return fmt.Errorf("containerd %s %s with handler %s: %w", what, s.spec.ID, s.c.handler, err)
}

// ioCreator gives a process our pipes: containerd's client copies the
// FIFOs (in the run dir) into their write ends, which stay open until
// those copies are done (waitIO).
func (s *sandbox) ioCreator(stdin io.Reader, st *process.Streams) cio.Creator {
	if in, ok := stdin.(*eofReader); ok && in == nil {
		stdin = nil // no stdin at all, not a nil reader
	}
	return cio.NewCreator(cio.WithStreams(stdin, st.WriteOut, st.WriteErr), cio.WithFIFODir(filepath.Join(s.b.Dir, "fifo")))
}

// Starting a task or exec is not cancelled with ctx: a job can write
// (and the caller cancel on what it wrote) before the call returns; Wait
// stops the job when ctx is done.

// Start boots a warm sandbox's first process and waits until it is ready.
func (s *sandbox) Start(ctx context.Context) error {
	if err := s.stage.Start(s.spec.ID); err != nil {
		return err
	}
	if s.spec.Boot == runtime.BootCold {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(s.b.Dir, "fifo"), 0o700); err != nil {
		return fmt.Errorf("make fifo dir: %w", err)
	}
	// Before the task exists: should the daemon die from here on, the
	// watchdog removes the task at once (watchdog.go), where it would
	// otherwise wait in its shim for a job that never comes.
	if err := s.startWatchdog(); err != nil {
		return err
	}
	argv := process.HolderArgv()
	if s.spec.Boot == runtime.BootPython {
		argv = process.SupervisorArgv()
	}
	st, err := process.NewStreams()
	if err != nil {
		return err
	}
	s.initStreams = st
	inR, inW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	s.initIn = inW
	s.initStdin = &eofReader{r: inR, eof: make(chan struct{})}
	exit, err := s.newTask(ctx, s.spec.ProcessJob(argv...), s.initStdin, st)
	if err != nil {
		inR.Close()
		return err
	}
	s.initExit = exit
	if err := s.task.Start(s.ctx(context.WithoutCancel(ctx))); err != nil {
		return s.handlerError("start task", err)
	}
	if err := st.WaitReady(ctx, runtime.BootTimeout); err != nil {
		msg := ""
		select {
		case ex := <-exit:
			msg = fmt.Sprintf(" (its first process exited %d)", ex.ExitCode())
		default:
		}
		return fmt.Errorf("sandbox %s (%s) did not boot: %v%s", s.spec.ID, s.spec.Boot, err, msg)
	}
	return nil
}

// startWatchdog starts the sandbox's watchdog (see watchdog.go).
func (s *sandbox) startWatchdog() error {
	wd, err := process.StartSandboxWatchdog(s.spec.ID, s.cg, s.b, s.c.watchdogArgs())
	if err != nil {
		return err
	}
	s.wd = wd
	return nil
}

// Deliver writes the invocation's files into the workdir and starts it.
func (s *sandbox) Deliver(ctx context.Context, inv runtime.Invocation) error {
	job, err := s.stage.Deliver(ctx, s.spec, inv, s.cg, s.b)
	if err != nil {
		return err
	}
	s.lim = job.Limits()
	// The deadline holds without the daemon: the task outlives it in its
	// shim, so its watchdog (started by Start for a warm sandbox) removes
	// it at the deadline unless Destroy released it.
	if s.wd == nil {
		if err := s.startWatchdog(); err != nil {
			return err
		}
	}
	if err := s.wd.SetDeadline(time.Now().Add(s.lim.Timeout + s.c.grace + process.WatchdogSlack)); err != nil {
		return err
	}
	switch s.spec.Boot {
	case runtime.BootPython:
		if s.started, err = process.HandOver(&s.initIn, job); err != nil {
			return err
		}
		s.streams, s.initStreams = s.initStreams, nil
		s.streams.Drain(s.lim, job.Invocation.Stdout, job.Invocation.Stderr)
		s.exit, s.proc = s.initExit, s.task
		s.closeStdinAtEOF(s.initStdin)
	case runtime.BootCold:
		if err := os.MkdirAll(filepath.Join(s.b.Dir, "fifo"), 0o700); err != nil {
			return fmt.Errorf("make fifo dir: %w", err)
		}
		st, stdin, err := s.jobIO(job)
		if err != nil {
			return err
		}
		exit, err := s.newTask(ctx, job, stdin, st)
		if err != nil {
			return err
		}
		s.started = time.Now()
		if err := s.task.Start(s.ctx(context.WithoutCancel(ctx))); err != nil {
			return s.handlerError("start task", err)
		}
		s.exit, s.proc = exit, s.task
		s.closeStdinAtEOF(stdin)
	case runtime.BootExec:
		if err := s.b.SpecFor(job, s.opts); err != nil {
			return err
		}
		st, stdin, err := s.jobIO(job)
		if err != nil {
			return err
		}
		p, err := s.task.Exec(s.ctx(ctx), execID, s.b.Spec.Process, s.ioCreator(stdin, st))
		if err != nil {
			return fmt.Errorf("exec into task %s: %w", s.spec.ID, err)
		}
		exit, err := p.Wait(s.lifeCtx)
		if err != nil {
			return fmt.Errorf("wait for exec in task %s: %w", s.spec.ID, err)
		}
		s.started = time.Now()
		if err := p.Start(s.ctx(context.WithoutCancel(ctx))); err != nil {
			return fmt.Errorf("start exec in task %s: %w", s.spec.ID, err)
		}
		s.exit, s.proc = exit, p
		s.closeStdinAtEOF(stdin)
	}
	s.c.log.Debug("job delivered", "id", s.spec.ID, "boot", s.spec.Boot)
	return nil
}

// Wait waits for the job to end and collects its result.
func (s *sandbox) Wait(ctx context.Context) (*runtime.Result, error) {
	if err := s.stage.Wait(s.spec.ID, s.exit != nil); err != nil {
		return nil, err
	}
	ex, exited, reason := process.AwaitEnd(ctx, s.exit, process.Ends{
		Left:       s.lim.Timeout - time.Since(s.started),
		StdoutOver: s.streams.Over(), StderrOver: s.streams.OverErr(), Egress: s.eg,
	})
	var sent syscall.Signal // the signal that ended a job we stopped
	if !exited {
		var ok bool
		ex, sent, ok = s.stop(reason == runtime.ReasonTimeout)
		if !ok {
			return nil, fmt.Errorf("run %s: the task did not exit after it was killed", s.spec.ID)
		}
	}
	duration := time.Since(s.started)
	if s.spec.Boot == runtime.BootExec {
		// The holder and anything the job left behind go now, so that no
		// process of the sandbox keeps the output pipes open.
		s.killAll(syscall.SIGKILL)
	}
	s.waitIO()
	s.streams.Finish()
	if err := ex.Error(); err != nil {
		return nil, fmt.Errorf("run %s: waiting for its exit: %w", s.spec.ID, err)
	}
	code := int(ex.ExitCode())
	if sent != 0 && code == runscKilledCode {
		// runsc, under a shim, reports a sandbox we killed as 255;
		// the result says what the other backends say: killed by sent.
		code = 128 + int(sent)
	}
	reason, _ = s.streams.EndReason(reason, s.cg)
	egStats, reason := process.FinishEgress(s.eg, reason)
	res := &runtime.Result{Egress: egStats, Duration: duration, Summary: outcome.Summary{
		ExitCode: code, Signal: process.ExitSignal(code), Reason: reason,
		Runtime: Name, RuntimeVersion: s.version, Warm: s.spec.Boot != runtime.BootCold,
		// The shim makes the run's cgroup from the spec; /work is
		// skillbox's tmpfs, /tmp gVisor's (runsc) or the kernel's (runc).
		LimitsEnforcedBy: s.c.enforcement(),
	}}
	s.streams.Fill(res, s.b, s.c.log)
	s.c.log.Debug("run finished", "id", s.spec.ID, "boot", s.spec.Boot, "reason", reason, "exit_code", code,
		"duration", duration, "stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr), "outputs", len(res.Outputs))
	return res, nil
}

// jobIO makes the job's streams, draining at its caps, and its stdin.
func (s *sandbox) jobIO(job runtime.Job) (*process.Streams, *eofReader, error) {
	st, err := process.NewStreams()
	if err != nil {
		return nil, nil, err
	}
	s.streams = st
	st.Drain(s.lim, job.Invocation.Stdout, job.Invocation.Stderr)
	return st, s.stdinOf(job.Invocation.Stdin), nil
}

// eofReader says when its reader is used up.
type eofReader struct {
	r    io.Reader
	once sync.Once
	eof  chan struct{}
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(func() { close(e.eof) })
	}
	return n, err
}

// stdinOf is the job's stdin for containerd's copy, nil for none.
func (s *sandbox) stdinOf(data []byte) *eofReader {
	if len(data) == 0 {
		return nil
	}
	return &eofReader{r: bytes.NewReader(data), eof: make(chan struct{})}
}

// closeStdinAtEOF closes the process's stdin once containerd has copied
// all of it: containerd does not pass the end of our reader on by itself.
func (s *sandbox) closeStdinAtEOF(in *eofReader) {
	if in == nil {
		return
	}
	p := s.proc
	go func() {
		select {
		case <-in.eof:
		case <-s.done:
			return
		}
		// The copy returns once the shim took the last bytes; give the
		// FIFO writer a moment to flush them before the shim closes it.
		ctx, cancel := context.WithTimeout(s.c.ctx(context.Background()), process.KillWait)
		defer cancel()
		if err := p.CloseIO(ctx, containerd.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
			s.c.log.Debug("closing stdin failed", "id", s.spec.ID, "error", err)
		}
	}()
}

// waitIO waits, a bounded time, for containerd's copies of the job's
// output into our pipes to finish (the FIFOs reach EOF once every process
// holding them is gone).
func (s *sandbox) waitIO() {
	if s.proc == nil || s.proc.IO() == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		s.proc.IO().Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.proc.IO().Cancel()
	}
}

// killAll signals every process of the task.
func (s *sandbox) killAll(sig syscall.Signal) {
	if s.task == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.c.ctx(context.Background()), process.TeardownTimeout)
	defer cancel()
	if err := s.task.Kill(ctx, sig, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
		s.c.log.Debug("kill failed", "id", s.spec.ID, "signal", sig, "error", err)
	}
}

// stop brings the job down: TERM to every process and the grace period
// when graceful, then KILL, repeated (a kill can race a start), until the
// job's process has exited.
func (s *sandbox) stop(graceful bool) (containerd.ExitStatus, syscall.Signal, bool) {
	if graceful {
		s.killAll(syscall.SIGTERM)
		select {
		case ex := <-s.exit:
			return ex, syscall.SIGTERM, true
		case <-time.After(s.c.grace):
		}
	}
	deadline := time.After(process.KillWait)
	for {
		s.killAll(syscall.SIGKILL)
		select {
		case ex := <-s.exit:
			return ex, syscall.SIGKILL, true
		case <-deadline:
			s.c.log.Warn("task did not stop on KILL", "id", s.spec.ID)
			return containerd.ExitStatus{}, 0, false
		case <-time.After(process.KillRetry):
		}
	}
}

// runscKilledCode is the exit status runsc gives a shim for a sandbox
// whose processes were killed.
const runscKilledCode = 255

// Destroy removes everything the sandbox made, with a context of its own.
func (s *sandbox) Destroy(context.Context) error {
	return s.destroyed.Do(func() error {
		close(s.done)
		err := s.teardown()
		s.lifeCancel()
		s.c.live.Remove(s.spec.ID)
		return err
	})
}

func (s *sandbox) teardown() error {
	ctx, cancel := process.TeardownContext()
	defer cancel()
	var errs []error
	if s.initIn != nil {
		_ = s.initIn.Close()
	}
	if err := s.c.remove(ctx, s.cl, s.spec.ID); err != nil {
		errs = append(errs, err)
	}
	for _, p := range []containerd.Process{s.proc, s.task} {
		if p != nil && p.IO() != nil {
			p.IO().Cancel()
			_ = p.IO().Close()
		}
	}
	for _, st := range []*process.Streams{s.initStreams, s.streams} {
		if st != nil {
			st.Close()
		}
	}
	if err := process.ReleaseSandbox(ctx, s.cg, s.eg, s.b, s.wd); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Processes lists the host pids in the sandbox's cgroup, for memory
// accounting.
func (s *sandbox) Processes() []int { return process.CgroupProcesses(s.cg) }
