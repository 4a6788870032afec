package ocicli

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/runtime/process"
)

// statusFD is the descriptor on which the first process of a detached
// sandbox (see detachedRunCommand) reports its job's exit status.
const statusFD = 3

// reportingSupervisor is the first process of a detached python sandbox: a
// shell that runs the supervisor (without the status descriptor, so the
// script cannot write on it) and writes its exit status there, as `run`
// would have exited: the code, or 128+n after signal n. The shell outlives
// a TERM to every process (the supervisor's own disposition is reset by
// exec), so that a stopped run still reports how the script ended.
func reportingSupervisor() []string {
	fd := strconv.Itoa(statusFD)
	return []string{"/bin/sh", "-c", `trap : TERM INT HUP QUIT USR1 USR2 ALRM; python3 -c "$0" ` + fd + `>&-; echo $? >&` + fd, process.SupervisorSource}
}

// Names in the bundle dir.
const execProcessFile = "process.json"

// sandbox is one container of an engine going through the lifecycle.
type sandbox struct {
	e       *engine
	spec    runtime.SandboxSpec
	version string
	opts    oci.SpecOptions
	b       *oci.Bundle
	cgPath  string
	stage   process.Stage

	// lifeCtx outlives the caller's ctx on purpose: the CLIs must stay
	// until we have stopped the container and read its counters; Destroy
	// cancels it.
	lifeCtx    context.Context
	lifeCancel context.CancelFunc

	// The `run` CLI: the container's first process, or (detached) what
	// started it.
	runCmd    *exec.Cmd
	runExited <-chan struct{}
	// Warm sandboxes: the first process's stdio, kept from Start.
	initIn, initOut, initErr *os.File
	// initExited is closed once the first process has exited; initStatus
	// is then its exit status. Attached, both are the run CLI's; detached,
	// they come from the status pipe (statusR).
	initExited <-chan struct{}
	initStatus func() (int, string)
	detached   bool
	statusR    *os.File

	// The job: its CLI (runCmd itself unless BootExec), pipes and captures.
	// jobCmd is nil when no CLI of ours waits for it (detached).
	jobCmd         *exec.Cmd
	jobExited      <-chan struct{}
	jobStatus      func() (int, string)
	outR, errR     *os.File
	outCap, errCap *oci.Capture
	lim            runtime.Limits
	started        time.Time
	// wd keeps the job's deadline should the daemon die (watchdog.go).
	wd *process.Watchdog

	// eg is the run's egress plumbing (nil without Egress); egStats its
	// totals once the job ended.
	eg *egress.Egress
	// mem holds the memory limit of a rootless sandbox (nil otherwise).
	mem *memoryWatch

	destroyed process.DestroyOnce
}

var _ runtime.Sandbox = (*sandbox)(nil)

func (e *engine) create(ctx context.Context, spec runtime.SandboxSpec) (_ runtime.Sandbox, err error) {
	if _, err := e.cli.lookup(); err != nil {
		return nil, err
	}
	version, err := e.cli.Version(ctx)
	if err != nil {
		return nil, err
	}
	if spec, err = runtime.CheckSpec(ctx, spec, runtime.LifecycleBoots...); err != nil {
		return nil, err
	}
	if e.rootless && (spec.Network || spec.Egress != nil) {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "network is not available without root: gVisor rootless (runsc --rootless) has no sandbox network, and skillbox never gives a sandbox the host's; run the script without network, or run skillbox as root (for example the daemon, sudo skillbox serve) for network and egress")
	}
	if spec.RootFS == "" {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "image %q is the registry image %s, which only the containerd runtime runs (it pulls and unpacks it); this runtime runs images skillbox builds: use --runtime containerd, or a recipe image", spec.Image.Name, spec.Image.Ref)
	}
	// The CLI's state dir holds its copy of the spec, with the job's
	// environment: root's alone, like the run dirs. runc and runsc make it
	// 0700 themselves; one made otherwise (by hand, by another tool) is
	// closed here.
	if err := oci.MakePrivateDir(e.cli.root, e.name+" state dir"); err != nil {
		return nil, err
	}
	opts := e.d.specOptions(spec.ProcessJob("true"))
	b, err := oci.NewSandboxBundle(spec, e.runDir, opts)
	if err != nil {
		return nil, err
	}
	s := &sandbox{e: e, spec: spec, version: version, opts: opts, b: b, cgPath: e.cgParent + "/" + spec.ID}
	s.lifeCtx, s.lifeCancel = context.WithCancel(context.Background())
	e.live.Add(s)
	defer func() {
		if err != nil {
			_ = s.Destroy(ctx)
		}
	}()
	if err := e.d.setupCgroup(s.cgPath, spec.Limits); err != nil {
		return nil, err
	}
	if s.eg, err = process.SetUp(ctx, spec, b, s.cgPath, &s.opts, e.log); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *sandbox) ID() string { return s.spec.ID }

// Start boots a warm sandbox's first process and waits until it is ready.
func (s *sandbox) Start(ctx context.Context) (err error) {
	if err := s.stage.Start(s.spec.ID); err != nil {
		return err
	}
	if s.spec.Boot == runtime.BootCold {
		return nil
	}
	global, args, detached := s.e.d.detachedRunCommand(s.networked(), s.b, statusFD)
	if detached && (reapsOrphans() || s.e.rootless) {
		// Rootless: the memory watch finds the sandbox as the attached
		// CLI's child.
		detached = false
	}
	argv := process.HolderArgv()
	if s.spec.Boot == runtime.BootPython {
		argv = process.SupervisorArgv()
		if detached {
			argv = reportingSupervisor()
		}
	}
	if err := s.b.SpecFor(s.spec.ProcessJob(argv...), s.opts); err != nil {
		return err
	}
	ps, err := process.MakePipes(3)
	if err != nil {
		return err
	}
	inR, inW, outR, outW, errR, errW := ps[0].R, ps[0].W, ps[1].R, ps[1].W, ps[2].R, ps[2].W
	s.initIn, s.initOut, s.initErr = inW, outR, errR
	if detached {
		err = s.startDetached(ctx, global, args, inR, outW, errW)
	} else {
		err = s.startRun(inR, outW, errW)
	}
	if err != nil {
		return err
	}
	if err := process.WaitReady(ctx, outR, runtime.BootTimeout); err != nil {
		return s.bootError(err)
	}
	return nil
}

// startDetached starts the sandbox with `run --detach`, waits for that CLI
// to return and from then on learns about the first process from the
// status pipe: its end (EOF: the process and with it the sandbox are gone)
// and the exit status the reporting shell wrote.
func (s *sandbox) startDetached(ctx context.Context, global, args []string, stdin, stdout, stderr *os.File) error {
	statusR, statusW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{stdin, stdout, stderr} {
			f.Close()
		}
		return fmt.Errorf("pipe: %w", err)
	}
	s.statusR, s.detached = statusR, true
	cmd, exited, err := s.startCLI(global, args, stdin, stdout, stderr, statusW)
	if err != nil {
		return err
	}
	s.runCmd, s.runExited = cmd, exited
	timer := time.NewTimer(runtime.BootTimeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		return fmt.Errorf("sandbox %s (%s) did not boot: %s run --detach still running after %s", s.spec.ID, s.spec.Boot, s.e.name, runtime.BootTimeout)
	case <-ctx.Done():
		return fmt.Errorf("sandbox %s (%s) did not boot: %w", s.spec.ID, s.spec.Boot, ctx.Err())
	}
	if code, _ := exitStatus(cmd.ProcessState); code != 0 {
		raw, err := s.endedBeforeReady()
		if err != nil {
			return err
		}
		return fmt.Errorf("sandbox %s (%s) did not boot: %s run --detach exited %d: %s", s.spec.ID, s.spec.Boot, s.e.name, code, raw)
	}
	st := readInitStatus(statusR)
	s.initExited, s.initStatus = st.done, st.status
	return nil
}

// reapsOrphans says whether orphaned processes are reparented to this one
// (pid 1 of a container, or a child subreaper). A detached sandbox's
// processes outlive the CLI that started them; here nothing would wait for
// them and they would stay as zombies, so the CLI stays attached instead.
func reapsOrphans() bool {
	if os.Getpid() == 1 {
		return true
	}
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		return true // unknown: the safe answer
	}
	return v != 0
}

// initStatusReport is what a detached sandbox's first process reported.
type initStatusReport struct {
	done     chan struct{}
	code     int
	reported bool
}

// readInitStatus reads the status pipe to its end in the background. The
// report is the shell's `echo $?`; a script could reach the descriptor
// through /proc and write there too, but all it can claim is an exit status
// of its own, which it could have exited with anyway.
func readInitStatus(r *os.File) *initStatusReport {
	st := &initStatusReport{done: make(chan struct{})}
	go func() {
		defer close(st.done)
		raw, _ := io.ReadAll(io.LimitReader(r, 64))
		// Done means the end of the pipe (the process, and with it the
		// sandbox, is gone), not the end of the first 64 bytes.
		_, _ = io.Copy(io.Discard, r)
		lines := strings.Fields(string(raw))
		if len(lines) == 0 {
			return
		}
		if code, err := strconv.Atoi(lines[len(lines)-1]); err == nil && code >= 0 && code <= 255 {
			st.code, st.reported = code, true
		}
	}()
	return st
}

// status is the first process's exit status once done is closed: its
// report, or, when it ended without one (killed with the whole sandbox),
// what `run` would have said of a KILL.
func (st *initStatusReport) status() (int, string) {
	if !st.reported {
		return 128 + int(syscall.SIGKILL), "SIGKILL"
	}
	return st.code, process.ExitSignal(st.code)
}

// bootError explains a warm sandbox that did not get ready.
func (s *sandbox) bootError(cause error) error {
	msg := ""
	select {
	case <-s.initExited:
		code, _ := s.initStatus()
		raw, err := s.endedBeforeReady()
		if err != nil {
			return err
		}
		msg = fmt.Sprintf(" (its first process exited %d: %s)", code, raw)
	default:
	}
	return fmt.Errorf("sandbox %s (%s) did not boot: %v%s", s.spec.ID, s.spec.Boot, cause, msg)
}

// endedBeforeReady is what a sandbox that ended before it was ready left:
// the runtime's own error when it logged one, else the head of its stderr.
func (s *sandbox) endedBeforeReady() ([]byte, error) {
	if err := s.e.d.setupError(s.b, 128); err != nil {
		return nil, err
	}
	_ = s.initErr.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	raw, _ := io.ReadAll(io.LimitReader(s.initErr, 2000))
	return raw, nil
}

// networked says whether the sandbox gets a network (its own, or egress).
func (s *sandbox) networked() bool { return s.spec.Network || s.spec.Egress != nil }

// startRun starts `<cli> run` of the bundle in the foreground with the
// given stdio (closed here, the child has its copies); its exit is the
// first process's.
func (s *sandbox) startRun(stdin, stdout, stderr *os.File) error {
	global, args := s.e.d.runCommand(s.networked(), s.b)
	cmd, exited, err := s.startCLI(global, args, stdin, stdout, stderr, nil)
	if err != nil {
		return err
	}
	s.runCmd, s.runExited = cmd, exited
	s.initExited = exited
	s.initStatus = func() (int, string) { return exitStatus(cmd.ProcessState) }
	if s.e.rootless && s.mem == nil {
		if s.e.delegated {
			s.mem = watchCgroup(cmd.Process.Pid, s.cgPath)
		} else {
			s.mem = watchMemory(cmd.Process.Pid, s.spec.Limits.MemoryBytes)
		}
	}
	return nil
}

// startCLI starts the CLI with the given stdio and, if not nil, extra as
// descriptor 3; it closes all of them (the child has its copies).
func (s *sandbox) startCLI(global, args []string, stdin, stdout, stderr, extra *os.File) (*exec.Cmd, <-chan struct{}, error) {
	defer func() {
		for _, f := range []*os.File{stdin, stdout, stderr, extra} {
			if f != nil {
				f.Close()
			}
		}
	}()
	cmd, err := s.e.cli.command(s.lifeCtx, global, args...)
	if err != nil {
		return nil, nil, err
	}
	cmd.Dir = s.b.Dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if extra != nil {
		cmd.ExtraFiles = []*os.File{extra}
	}
	s.e.log.Debug("sandbox starting", "id", s.spec.ID, "boot", s.spec.Boot, "args", cmd.Args)
	exited, err := startTied(cmd)
	if err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", s.e.name, err)
	}
	return cmd, exited, nil
}

func (s *sandbox) Deliver(ctx context.Context, inv runtime.Invocation) (err error) {
	job, err := s.stage.Deliver(ctx, s.spec, inv, s.cgPath, s.b)
	if err != nil {
		return err
	}
	s.lim = job.Limits()
	s.outCap = oci.NewCapture(s.lim.StdoutBytes, job.Invocation.Stdout)
	s.errCap = oci.NewCapture(s.lim.StderrBytes, job.Invocation.Stderr)
	// The deadline holds without us: from here on the job may run.
	if s.wd, err = process.StartWatchdog(s.spec.ID, s.cgPath, time.Now().Add(s.lim.Timeout+s.e.grace+process.WatchdogSlack), filepath.Join(s.b.Dir, oci.BundleWatchdogLog)); err != nil {
		return err
	}

	switch s.spec.Boot {
	case runtime.BootPython:
		if s.started, err = process.HandOver(&s.initIn, job); err != nil {
			return err
		}
		s.jobExited, s.jobStatus = s.initExited, s.initStatus
		if !s.detached {
			s.jobCmd = s.runCmd
		}
		s.outR, s.errR = s.initOut, s.initErr
		s.initOut, s.initErr = nil, nil
	case runtime.BootCold:
		if err := s.b.SpecFor(job, s.opts); err != nil {
			return err
		}
		if err := s.startJob(job.Invocation.Stdin, func(in, out, errw *os.File) error {
			if err := s.startRun(in, out, errw); err != nil {
				return err
			}
			s.jobCmd, s.jobExited, s.jobStatus = s.runCmd, s.initExited, s.initStatus
			return nil
		}); err != nil {
			return err
		}
	case runtime.BootExec:
		spec, err := oci.BuildSpec(job, withSources(s.opts, s.b))
		if err != nil {
			return err
		}
		if err := s.b.WriteJSON(execProcessFile, spec.Process); err != nil {
			return err
		}
		if err := s.startJob(job.Invocation.Stdin, func(in, out, errw *os.File) error {
			defer func() {
				for _, f := range []*os.File{in, out, errw} {
					if f != nil {
						f.Close()
					}
				}
			}()
			global, args := s.e.d.execCommand(s.b, filepath.Join(s.b.Dir, execProcessFile))
			cmd, err := s.e.cli.command(s.lifeCtx, global, args...)
			if err != nil {
				return err
			}
			cmd.Dir = s.b.Dir
			cmd.Stdout, cmd.Stderr = out, errw
			if in != nil {
				cmd.Stdin = in
			}
			exited, err := startTied(cmd)
			if err != nil {
				return fmt.Errorf("start %s exec: %w", s.e.name, err)
			}
			s.jobCmd, s.jobExited = cmd, exited
			s.jobStatus = func() (int, string) { return exitStatus(cmd.ProcessState) }
			return nil
		}); err != nil {
			return err
		}
	}
	go s.outCap.Drain(s.outR)
	go s.errCap.Drain(s.errR)
	s.e.log.Debug("job delivered", "id", s.spec.ID, "boot", s.spec.Boot)
	return nil
}

// withSources fills in the bundle's workdir and hosts file.
func withSources(o oci.SpecOptions, b *oci.Bundle) oci.SpecOptions {
	o.WorkdirSource = b.Workdir
	o.HostsSource = filepath.Join(b.Dir, oci.BundleHosts)
	return o
}

// startJob makes the job's pipes, calls start with the child's ends (which
// start closes) and feeds stdin.
func (s *sandbox) startJob(stdin []byte, start func(in, out, errw *os.File) error) error {
	n := 2
	if len(stdin) > 0 {
		n = 3
	}
	ps, err := process.MakePipes(n)
	if err != nil {
		return err
	}
	outR, outW, errR, errW := ps[0].R, ps[0].W, ps[1].R, ps[1].W
	s.outR, s.errR = outR, errR
	var inR, inW *os.File
	if n == 3 {
		inR, inW = ps[2].R, ps[2].W
	}
	s.started = time.Now()
	if err := start(inR, outW, errW); err != nil {
		if inW != nil {
			inW.Close()
		}
		return err
	}
	if inW != nil {
		process.FeedAndClose(inW, stdin)
	}
	return nil
}

func (s *sandbox) Wait(ctx context.Context) (*runtime.Result, error) {
	if err := s.stage.Wait(s.spec.ID, s.jobExited != nil); err != nil {
		return nil, err
	}
	e, id := s.e, s.spec.ID
	_, exited, reason := process.AwaitEnd(ctx, s.jobExited, process.Ends{
		Left:       s.lim.Timeout - time.Since(s.started),
		StdoutOver: s.outCap.Over, StderrOver: s.errCap.Over, Egress: s.eg,
	})
	if !exited {
		e.stop(id, s.jobCmd, s.jobExited, reason == runtime.ReasonTimeout)
	}
	select {
	case <-s.jobExited:
	default:
		return nil, fmt.Errorf("run %s: %s did not exit after the container was killed", id, e.name)
	}
	duration := time.Since(s.started)
	if s.spec.Boot == runtime.BootExec {
		// The holder and anything the job left behind go now, so that no
		// process of the sandbox keeps the output pipes open.
		e.stop(id, s.initCmd(), s.initExited, false)
	}

	// The container's processes died with its pid namespace (runc) or its
	// sandbox (runsc), so the pipes reach EOF; the deadline is for anything
	// else that kept a write end.
	process.WaitDrains(s.outCap, s.outR, s.errCap, s.errR)
	code, signal := s.jobStatus()
	reason, ev := process.EndReason(reason, s.outCap, s.errCap, s.cgPath)
	if s.mem != nil {
		over, peak, err := s.mem.Stop()
		if err != nil {
			return nil, errkind.Wrap(runtime.ErrUnavailable, fmt.Errorf("run %s was stopped: %w", id, err))
		}
		if over && reason == runtime.ReasonExit {
			reason = runtime.ReasonOOM
		}
		e.log.Debug("rootless sandbox memory", "id", id, "peak_bytes", peak, "limit_bytes", s.spec.Limits.MemoryBytes, "killed", over)
	}
	egStats, reason := process.FinishEgress(s.eg, reason)
	// A run that we stopped, or that ran into its memory or pids limit,
	// did run; the CLI may still log errors about how its sandbox ended.
	if reason == runtime.ReasonExit {
		if serr := e.d.setupError(s.b, code); serr != nil {
			return nil, serr
		}
	}

	res := &runtime.Result{Duration: duration, Egress: egStats, Summary: outcome.Summary{
		ExitCode: code, Signal: signal, Reason: reason,
		Runtime: e.name, RuntimeVersion: s.version, Warm: s.spec.Boot != runtime.BootCold,
		// What held the limits of this run on this host.
		LimitsEnforcedBy: e.d.enforcement(),
	}}
	process.FillResult(res, s.outCap, s.errCap, s.b, e.log)
	e.log.Debug("run finished", "id", id, "boot", s.spec.Boot, "reason", reason, "exit_code", code, "signal", signal,
		"duration", duration, "oom_kills", ev.OOMKills, "pids_max_events", ev.PidsMax,
		"stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr), "outputs", len(res.Outputs),
		"outputs_truncated_by", res.OutputsTruncatedBy)
	return res, nil
}

// Destroy removes everything the sandbox made. It uses its own context so
// that a cancelled caller cannot leave a container, mount or cgroup behind.
func (s *sandbox) Destroy(context.Context) error {
	return s.destroyed.Do(func() error {
		defer s.e.live.Remove(s.spec.ID)
		return s.teardown()
	})
}

func (s *sandbox) teardown() error {
	ctx, cancel := process.TeardownContext()
	defer cancel()
	var errs []error
	if s.runCmd != nil {
		if err := s.e.cli.delete(ctx, s.spec.ID); err != nil {
			errs = append(errs, err)
		}
	}
	s.lifeCancel()
	if s.mem != nil {
		_, _, _ = s.mem.Stop()
	}
	for _, c := range []*exec.Cmd{s.runCmd, s.jobCmd} {
		if c != nil && c.Process != nil {
			// Anything the CLI forked that is still in its group (a runsc
			// gofer or sandbox that outlived a crash of the CLI).
			_ = killGroup(c)
		}
	}
	for _, f := range []*os.File{s.initIn, s.initOut, s.initErr, s.outR, s.errR, s.statusR} {
		if f != nil {
			_ = f.Close()
		}
	}
	if err := process.ReleaseSandbox(ctx, s.cgPath, s.eg, s.b, s.wd); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// close destroys every sandbox of the engine that is still there.
func (e *engine) close(ctx context.Context) error {
	return errors.Join(e.sessions.DestroyAll(ctx), e.live.DestroyAll(ctx))
}

// initCmd is the CLI whose process group holds the first process, when a
// CLI of ours still waits for it (not when detached).
func (s *sandbox) initCmd() *exec.Cmd {
	if s.detached {
		return nil
	}
	return s.runCmd
}

// Processes lists the host pids of the sandbox's processes (its cgroup's
// and the CLI waiting for it, if any), for memory accounting.
func (s *sandbox) Processes() []int {
	pids := process.CgroupProcesses(s.cgPath)
	if c := s.initCmd(); c != nil && c.Process != nil {
		select {
		case <-s.runExited:
		default:
			pids = append(pids, c.Process.Pid)
		}
	}
	return pids
}
