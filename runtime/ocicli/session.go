package ocicli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/checkpoint"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/process"
	"github.com/skillbox/skillbox/runtime/supervisor"
)

// A session sandbox (runtime.SessionSandbox) on runsc: booted like a warm
// sandbox (`run --detach` of the bundle, or attached where the CLI must
// stay), with skillbox's supervisor as its first process. Every run is a
// request down the supervisor's stdin; its output, start and end come
// back as events on its stdout (runtime/supervisor). The workdir tmpfs
// and the cgroup are the sandbox's for its whole life, so a run's outputs
// are what changed in /work during it, and its OOM and pids events are
// the counters' growth during it.

// pythonWorkers is how many interpreters a session sandbox keeps started.
const pythonWorkers = 2

// sessionArgv is a session sandbox's first process.
func sessionArgv() []string {
	return []string{runtime.SupervisorPath, "supervise", "--python-workers", strconv.Itoa(pythonWorkers)}
}

// supervisorDigest is the hex sha256 of the supervisor binary at p (a
// link resolved), hashed once per path, size and mtime rather than at
// every checkpoint.
func (e *engine) supervisorDigest(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s|%d|%d", real, st.Size(), st.ModTime().UnixNano())
	e.mu.Lock()
	d, ok := e.digests[key]
	e.mu.Unlock()
	if ok {
		return d, nil
	}
	if _, d, err = checkpoint.HashFile(real); err != nil {
		return "", err
	}
	e.mu.Lock()
	if e.digests == nil {
		e.digests = map[string]string{}
	}
	e.digests[key] = d
	e.mu.Unlock()
	return d, nil
}

// sessionStopWait bounds how long a killed run may take to be reported.
const sessionStopWait = 5 * time.Second

type sessionSandbox struct {
	e       *engine
	spec    runtime.SandboxSpec
	version string
	opts    oci.SpecOptions
	b       *oci.Bundle
	cgPath  string

	lifeCtx    context.Context
	lifeCancel context.CancelFunc
	runCmd     *exec.Cmd
	runExited  <-chan struct{}
	detached   bool
	initIn     *os.File
	initOut    *os.File
	initErr    *os.File
	stderr     *tailBuffer // the supervisor's own stderr, for errors
	client     *supervisor.Client
	mem        *memoryWatch

	fg sync.Mutex // one foreground run at a time

	mu   sync.Mutex
	bg   map[string]*runtime.BackgroundRun
	done chan struct{}
	// paused: the sandbox went into a checkpoint (its background runs
	// did not end).
	paused bool
	// frozen: Freeze holds the sandbox (and fg) until Thaw or Destroy;
	// reserved is the budget Freeze reserved /work's copy against, for
	// the Checkpoint that follows.
	frozen   bool
	reserved runtime.CheckpointBudget

	destroyOnce sync.Once
	destroyErr  error
}

var _ runtime.SessionSandbox = (*sessionSandbox)(nil)

// CreateSession boots a session sandbox: the bundle, cgroup and workdir
// of a sandbox, and the supervisor started in it and ready.
func (e *engine) createSession(ctx context.Context, spec runtime.SandboxSpec) (_ runtime.SessionSandbox, err error) {
	s, err := e.prepareSession(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := s.boot(ctx, nil); err != nil {
		_ = s.Destroy(ctx)
		return nil, err
	}
	return s, nil
}

// restoreSession makes a sandbox from spec as createSession does, with
// /work copied from workDir, and restores the checkpoint at imageDir into
// it: the supervisor and every process it had go on where they were.
func (e *engine) restoreSession(ctx context.Context, spec runtime.SandboxSpec, imageDir, workDir string, bg []runtime.BackgroundRun) (_ runtime.SessionSandbox, err error) {
	if e.rootless {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "restoring a session checkpoint needs root (runsc refuses restore with --rootless)")
	}
	s, err := e.prepareSession(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Destroy(ctx)
		}
	}()
	skipped, err := checkpoint.CopyTree(workDir, s.b.Workdir+"/.restore")
	if err == nil {
		err = moveUp(s.b.Workdir+"/.restore", s.b.Workdir)
	}
	if err != nil {
		return nil, fmt.Errorf("restore /work of session sandbox %s: %w", spec.ID, err)
	}
	if len(skipped) > 0 {
		e.log.Warn("entries of /work not restored", "id", spec.ID, "skipped", skipped)
	}
	for _, r := range bg {
		r.LogHost = filepath.Join(s.b.Workdir, path.Base(runtime.SessionStateDir), path.Base(runtime.SessionRunsDir), r.ID+".log")
		run := r
		s.bg[r.ID] = &run
	}
	if err := s.boot(ctx, []string{"restore", "--image-path", imageDir}); err != nil {
		return nil, err
	}
	return s, nil
}

// moveUp moves every entry of dir into its parent and removes dir (the
// workdir tmpfs is a mount point, so the copy goes into it, then up).
func moveUp(dir, parent string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() == path.Base(runtime.SessionStateDir) {
			_ = os.RemoveAll(filepath.Join(parent, e.Name())) // made empty by prepareSession
		}
		if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(parent, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(dir)
}

// prepareSession makes what a session sandbox runs in: bundle, cgroup,
// config.json with the supervisor as the first process, the state dir
// in /work.
func (e *engine) prepareSession(ctx context.Context, spec runtime.SandboxSpec) (_ *sessionSandbox, err error) {
	if e.name != "runsc" {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "isolation = \"session\" needs the runsc runtime (gVisor): %s cannot keep a sandbox across runs or checkpoint it; use runtime = \"runsc\" or isolation = \"run\"", e.name)
	}
	if spec.Boot != runtime.BootSession || spec.Session == nil {
		return nil, errkind.Errorf(runtime.ErrInvalidJob, "sandbox %s is not a session sandbox", spec.ID)
	}
	if spec.Network || spec.Egress != nil {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "a session sandbox has no network yet: a skill with network or egress runs with isolation = \"run\"")
	}
	if e.rootless {
		// runsc refuses to restore rootless, so such a session could
		// never be paused: not offered rather than offered in part.
		return nil, errkind.Errorf(runtime.ErrUnavailable, "isolation = \"session\" needs skillbox with root (the daemon: sudo skillbox serve): gVisor cannot restore a rootless sandbox's checkpoint; without root the skill's runs need isolation = \"run\"")
	}
	if _, err := e.cli.lookup(); err != nil {
		return nil, err
	}
	version, err := e.cli.Version(ctx)
	if err != nil {
		return nil, err
	}
	if spec.RootFS == "" {
		return nil, errkind.Errorf(runtime.ErrUnavailable, "image %q is the registry image %s, which only the containerd runtime runs", spec.Image.Name, spec.Image.Ref)
	}
	if spec, err = runtime.CheckSpec(ctx, spec, runtime.BootSession); err != nil {
		return nil, err
	}
	if err := oci.MakePrivateDir(e.cli.root, e.name+" state dir"); err != nil {
		return nil, err
	}
	probe := spec.ProcessJob(sessionArgv()...)
	opts := e.d.specOptions(probe)
	b, err := oci.NewSandboxBundle(spec, e.runDir, opts)
	if err != nil {
		return nil, err
	}
	s := &sessionSandbox{e: e, spec: spec, version: version, opts: opts, b: b, cgPath: e.cgParent + "/" + spec.ID,
		bg: map[string]*runtime.BackgroundRun{}, done: make(chan struct{}), stderr: &tailBuffer{max: 8 << 10}}
	s.lifeCtx, s.lifeCancel = context.WithCancel(context.Background())
	e.sessions.Add(s)
	defer func() {
		if err != nil {
			_ = s.Destroy(ctx)
		}
	}()
	if err := e.d.setupCgroup(s.cgPath, spec.Limits); err != nil {
		return nil, err
	}
	if err := s.b.SpecFor(probe, s.opts); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(b.Workdir, path.Base(runtime.SessionStateDir)), 0o700); err != nil {
		return nil, fmt.Errorf("make session state dir: %w", err)
	}
	if err := chownTree(filepath.Join(b.Workdir, path.Base(runtime.SessionStateDir)), b.OwnerUID, b.OwnerGID); err != nil {
		return nil, err
	}
	return s, nil
}

// chownTree gives dir to the sandbox's user.
func chownTree(dir string, uid, gid int) error {
	if err := os.Lchown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	return nil
}

// boot starts the supervisor and waits until it is ready; with restore
// (the `restore` arguments before the bundle's), it restores a checkpoint
// instead and waits until the restored supervisor answers on its new
// stdio, then has it replace its pre-started interpreters, so that none
// from before the checkpoint serves a run after it.
func (s *sessionSandbox) boot(ctx context.Context, restore []string) error {
	ps, err := process.MakePipes(3)
	if err != nil {
		return err
	}
	inR, inW, outR, outW, errR, errW := ps[0].R, ps[0].W, ps[1].R, ps[1].W, ps[2].R, ps[2].W
	s.initIn, s.initOut, s.initErr = inW, outR, errR
	global, args := s.e.d.runCommand(false, s.b)
	s.detached = !(reapsOrphans() || s.e.rootless)
	if restore != nil {
		args = append(append([]string(nil), restore...), args[1:]...)
	}
	if s.detached {
		args = append([]string{args[0], "--detach"}, args[1:]...)
	}
	cmd, err := s.e.cli.command(s.lifeCtx, global, args...)
	if err != nil {
		for _, f := range []*os.File{inR, outW, errW} {
			f.Close()
		}
		return err
	}
	cmd.Dir = s.b.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	s.e.log.Debug("session sandbox starting", "id", s.spec.ID, "args", cmd.Args)
	exited, err := startTied(cmd)
	for _, f := range []*os.File{inR, outW, errW} {
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", s.e.name, err)
	}
	s.runCmd, s.runExited = cmd, exited
	go func() { _, _ = io.Copy(s.stderr, errR) }()
	if s.e.rootless && !s.detached {
		if s.e.delegated {
			s.mem = watchCgroup(cmd.Process.Pid, s.cgPath)
		} else {
			s.mem = watchMemory(cmd.Process.Pid, s.spec.Limits.MemoryBytes)
		}
	}
	s.client = supervisor.NewClient(inW, outR, supervisor.WithOnExit(s.backgroundExited))
	s.initIn = nil // the client owns it now
	go func() {
		select {
		case <-s.client.Dead():
		case <-s.lifeCtx.Done():
		}
		s.markDone()
	}()
	bctx, cancel := context.WithTimeout(ctx, runtime.BootTimeout)
	defer cancel()
	if restore == nil {
		if _, err := s.client.Ready(bctx); err != nil {
			return s.bootError(err)
		}
		return nil
	}
	if err := s.client.Ping(bctx); err != nil {
		return s.bootError(fmt.Errorf("the restored supervisor does not answer: %w", err))
	}
	if err := s.client.Reseed(bctx); err != nil {
		return s.bootError(fmt.Errorf("the restored supervisor did not replace its interpreters: %w", err))
	}
	return s.reconcile(bctx)
}

// reconcile learns from the supervisor which background runs still run
// (after a restore): those it reports ended are reported so.
func (s *sessionSandbox) reconcile(ctx context.Context) error {
	list, err := s.client.List(ctx)
	if err != nil {
		return fmt.Errorf("list the restored sandbox's runs: %w", err)
	}
	live := map[string]supervisor.RunStatus{}
	for _, r := range list {
		live[r.ID] = r
	}
	s.mu.Lock()
	ended := map[string]supervisor.Exit{}
	for id, br := range s.bg {
		st, ok := live[id]
		switch {
		case ok && st.Running:
			br.PID = st.PID
		case ok && st.Exit != nil:
			ended[id] = *st.Exit
		default:
			br.Running = false // unknown to the supervisor: gone
		}
	}
	s.mu.Unlock()
	for id, ex := range ended {
		s.backgroundExited(id, ex)
	}
	return nil
}

// Identity implements runtime.Checkpointer.
func (s *sessionSandbox) Identity(ctx context.Context) (runtime.SandboxIdentity, error) {
	return s.e.sessionIdentity(ctx, s.b.Spec, s.spec)
}

// sessionIdentity is the identity of a session sandbox with OCI spec sp.
func (e *engine) sessionIdentity(ctx context.Context, sp *specs.Spec, spec runtime.SandboxSpec) (runtime.SandboxIdentity, error) {
	version, err := e.cli.Version(ctx)
	if err != nil {
		return runtime.SandboxIdentity{}, err
	}
	sup, err := e.supervisorDigest(spec.Session.Supervisor)
	if err != nil {
		return runtime.SandboxIdentity{}, fmt.Errorf("supervisor binary: %w", err)
	}
	d, err := oci.SpecDigest(sp, "supervisor="+sup)
	if err != nil {
		return runtime.SandboxIdentity{}, err
	}
	return runtime.SandboxIdentity{RuntimeVersion: version, Platform: e.platform, Network: "none", SpecDigest: d}, nil
}

// SessionIdentity implements runtime.SessionRestorer: the identity of a
// sandbox spec would make, without making it.
func (e *engine) sessionSpecIdentity(ctx context.Context, spec runtime.SandboxSpec) (runtime.SandboxIdentity, error) {
	spec.Limits = spec.Limits.WithDefaults()
	probe := spec.ProcessJob(sessionArgv()...)
	opts := e.d.specOptions(probe)
	opts.WorkdirSource, opts.HostsSource = "/placeholder/work", "/placeholder/hosts"
	sp, err := oci.BuildSpec(probe, opts)
	if err != nil {
		return runtime.SandboxIdentity{}, err
	}
	return e.sessionIdentity(ctx, sp, spec)
}

// Checkpoint implements runtime.Checkpointer. What a copy of /work
// would take is reserved against budget first, before anything stops, so
// a checkpoint that cannot fit is refused with the sandbox running as it
// was. The sandbox is then frozen (runsc pause) while runsc writes its
// image and /work is copied (every write charged to budget), so that the
// two agree, and runsc leaves it in place (--leave-running): a checkpoint
// that fails at any step leaves the sandbox as it was, thawed again, and
// none that fails half-pauses it. Without leaveRunning it is destroyed
// once the checkpoint is complete. A sandbox its caller froze (Freeze,
// which made the reservation) stays frozen for the caller's Thaw.
func (s *sessionSandbox) Checkpoint(ctx context.Context, imageDir, workDir string, leaveRunning bool, budget runtime.CheckpointBudget) error {
	s.mu.Lock()
	held := s.frozen
	reserved := s.reserved
	s.reserved = nil
	s.mu.Unlock()
	if !held {
		s.fg.Lock()
		defer s.fg.Unlock()
	}
	select {
	case <-s.done:
		return s.gone()
	default:
	}
	if budget != nil && !(held && reserved == budget) {
		if err := s.reserve(budget); err != nil {
			return err
		}
	}
	if !held {
		if err := s.freeze(ctx); err != nil {
			return err
		}
	}
	err := s.checkpointFrozen(ctx, imageDir, workDir, budget)
	switch {
	case err != nil && held:
		return err
	case err != nil || (leaveRunning && !held):
		return errors.Join(err, s.thaw(ctx))
	case leaveRunning:
		return nil
	}
	s.paused = true
	return s.destroyLocked()
}

// reserve walks /work and reserves against budget what its copy would
// take; its error says the sandbox runs on (nothing was stopped or
// written yet).
func (s *sessionSandbox) reserve(budget runtime.CheckpointBudget) error {
	u, err := checkpoint.Measure(s.b.Workdir, 0)
	if err != nil {
		return fmt.Errorf("checkpoint of session sandbox %s: %w", s.spec.ID, err)
	}
	if err := budget.Reserve(u.Need()); err != nil {
		return fmt.Errorf("checkpoint of session sandbox %s refused before anything was written (the sandbox runs on): its /work holds %s: %w", s.spec.ID, u, err)
	}
	return nil
}

// checkpointFrozen writes the frozen sandbox's image to imageDir and
// copies its /work to workDir, charging both to budget (nil: no bound);
// it stays frozen.
func (s *sessionSandbox) checkpointFrozen(ctx context.Context, imageDir, workDir string, budget runtime.CheckpointBudget) error {
	if out, err := s.e.cli.exec(ctx, "checkpoint", "--image-path", imageDir, "--leave-running", s.spec.ID); err != nil {
		return fmt.Errorf("checkpoint of session sandbox %s: %w (%s)", s.spec.ID, err, bytes.TrimSpace(out))
	}
	opts := checkpoint.CopyOptions{}
	if budget != nil {
		// The image is bounded by the sandbox's memory; it is charged
		// before /work is copied beside it.
		if err := budget.Charge(dirBytes(imageDir)); err != nil {
			return fmt.Errorf("checkpoint of session sandbox %s: its memory image: %w", s.spec.ID, err)
		}
		opts.Charge = budget.Charge
	}
	skipped, err := checkpoint.CopyTreeWith(s.b.Workdir, workDir, opts)
	if err != nil {
		return fmt.Errorf("copy /work of session sandbox %s: %w", s.spec.ID, err)
	}
	if len(skipped) > 0 {
		s.e.log.Warn("entries of /work not kept with the checkpoint", "id", s.spec.ID, "skipped", skipped)
	}
	return nil
}

// Freeze implements runtime.Freezer: what a copy of /work would take is
// reserved against budget (nil: no bound) while the sandbox still runs,
// then its processes stop, and runs wait, until Thaw (or Destroy).
func (s *sessionSandbox) Freeze(ctx context.Context, budget runtime.CheckpointBudget) error {
	s.fg.Lock()
	select {
	case <-s.done:
		s.fg.Unlock()
		return s.gone()
	default:
	}
	if budget != nil {
		if err := s.reserve(budget); err != nil {
			s.fg.Unlock()
			return err
		}
	}
	if err := s.freeze(ctx); err != nil {
		s.fg.Unlock()
		return err
	}
	s.mu.Lock()
	s.frozen = true
	s.reserved = budget
	s.mu.Unlock()
	return nil
}

// Thaw implements runtime.Freezer.
func (s *sessionSandbox) Thaw(ctx context.Context) error {
	s.mu.Lock()
	was := s.frozen
	s.frozen, s.reserved = false, nil
	s.mu.Unlock()
	if !was {
		return nil
	}
	defer s.fg.Unlock()
	return s.thaw(ctx)
}

// freeze pauses the sandbox; one that fails to is thawed again (runsc may
// have paused part of it) or, failing that, destroyed.
func (s *sessionSandbox) freeze(ctx context.Context) error {
	if _, err := s.e.cli.exec(ctx, "pause", s.spec.ID); err != nil {
		return errors.Join(fmt.Errorf("freeze session sandbox %s for its checkpoint: %w", s.spec.ID, err), s.thaw(ctx))
	}
	return nil
}

// thaw resumes the frozen sandbox, with a context of its own (a pause
// whose caller gave up must still thaw it). A sandbox that died, or that
// cannot be resumed, is destroyed with everything it had on the host: the
// error says so, and that it is gone.
func (s *sessionSandbox) thaw(ctx context.Context) error {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), process.TeardownTimeout)
	defer cancel()
	_, err := s.e.cli.exec(tctx, "resume", s.spec.ID)
	if err != nil {
		// Not paused (runsc never froze it, or it ended): running is as
		// good as resumed.
		if st, serr := s.e.cli.state(tctx, s.spec.ID); serr == nil && st.Status == "running" {
			err = nil
		}
	}
	select {
	case <-s.done:
		if err == nil {
			err = errors.New("it ended")
		}
	default:
	}
	if err == nil {
		return nil
	}
	derr := s.destroyLocked()
	return errkind.Errorf(runtime.ErrUnavailable, "session sandbox %s could not be resumed after its checkpoint (%v) and was removed: %w", s.spec.ID, err, errors.Join(errSandboxGone, derr))
}

// errSandboxGone marks an error after which the sandbox is destroyed.
var errSandboxGone = errors.New("the sandbox, its processes and its /work are gone")

func (s *sessionSandbox) markDone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
	default:
		close(s.done)
	}
}

// bootError explains a supervisor that did not get ready.
func (s *sessionSandbox) bootError(cause error) error {
	if err := s.e.d.setupError(s.b, 128); err != nil {
		return err
	}
	msg := bytes.TrimSpace(s.stderr.Bytes())
	if len(msg) > 0 {
		return fmt.Errorf("session sandbox %s did not boot: %v (supervisor: %s)", s.spec.ID, cause, msg)
	}
	return fmt.Errorf("session sandbox %s did not boot: %w", s.spec.ID, cause)
}

func (s *sessionSandbox) ID() string { return s.spec.ID }

// Spec is what the sandbox was made from (to restore it after a
// checkpoint with another ID).
func (s *sessionSandbox) Spec() runtime.SandboxSpec { return s.spec }
func (s *sessionSandbox) Workdir() string           { return s.b.Workdir }
func (s *sessionSandbox) Done() <-chan struct{}     { return s.done }

// gone is the error of a call on a sandbox that is no longer there.
func (s *sessionSandbox) gone() error {
	if err := s.client.Err(); err != nil {
		return errkind.Errorf(runtime.ErrUnavailable, "session sandbox %s is gone (%v): the session starts a new one on its next run", s.spec.ID, err)
	}
	return errkind.Errorf(runtime.ErrUnavailable, "session sandbox %s is gone: the session starts a new one on its next run", s.spec.ID)
}

// request is the supervisor's request for a run of inv.
func (s *sessionSandbox) request(ctx context.Context, runID string, inv runtime.Invocation) (supervisor.Request, runtime.Job, error) {
	select {
	case <-s.done:
		return supervisor.Request{}, runtime.Job{}, s.gone()
	default:
	}
	if !runtime.JobIDPattern.MatchString(runID) {
		return supervisor.Request{}, runtime.Job{}, errkind.Errorf(runtime.ErrInvalidJob, "run id %q must be [a-zA-Z0-9_-]", runID)
	}
	job, err := runtime.Accept(ctx, s.spec, inv)
	if err != nil {
		return supervisor.Request{}, runtime.Job{}, err
	}
	env, err := runtime.ContainerEnv(job.Invocation.Env)
	if err != nil {
		return supervisor.Request{}, runtime.Job{}, err
	}
	if err := s.b.WriteSessionInputs(job.Invocation.Files); err != nil {
		return supervisor.Request{}, runtime.Job{}, err
	}
	req := supervisor.Request{Op: supervisor.OpRun, ID: runID, Argv: job.Invocation.Args, Env: append(env, job.Invocation.ModuleEnv...),
		Cwd: runtime.WorkDir, Stdin: job.Invocation.Stdin, Python: runtime.PythonInvocation(job.Invocation.Args)}
	return req, job, nil
}

func (s *sessionSandbox) Run(ctx context.Context, runID string, inv runtime.Invocation) (*runtime.Result, error) {
	s.fg.Lock()
	defer s.fg.Unlock()
	req, job, err := s.request(ctx, runID, inv)
	if err != nil {
		return nil, err
	}
	lim := job.Limits()
	before, err := s.b.WorkdirState()
	if err != nil {
		return nil, err
	}
	cgBefore := process.ReadCgroupEvents(s.cgPath)
	outCap, errCap := oci.NewCapture(lim.StdoutBytes, job.Invocation.Stdout), oci.NewCapture(lim.StderrBytes, job.Invocation.Stderr)
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	go outCap.Drain(outR)
	go errCap.Drain(errR)
	closeStreams := func() {
		outW.Close()
		errW.Close()
		<-outCap.Done
		<-errCap.Done
	}
	started := time.Now()
	run, err := s.client.Start(ctx, req, outW, errW)
	if err != nil {
		closeStreams()
		return nil, s.runError(runID, err)
	}
	_, exited, reason := process.AwaitEnd(ctx, run.Done(), process.Ends{
		Left: lim.Timeout - time.Since(started), StdoutOver: outCap.Over, StderrOver: errCap.Over,
	})
	if !exited {
		if err := s.stopRun(ctx, run, reason == runtime.ReasonTimeout); err != nil {
			// A supervisor that cannot stop a run is not one to trust
			// with the next: the sandbox goes.
			closeStreams()
			_ = s.Destroy(ctx)
			return nil, fmt.Errorf("run %s: %w", runID, err)
		}
	}
	duration := time.Since(started)
	closeStreams()
	ex := run.Exit()
	if run.Err() != nil {
		// The sandbox went down under the run: at its memory or pids
		// limit (the host kernel kills the whole sandbox at its cgroup's
		// limits), which the result says as for any run, or for another
		// reason, which is an error; either way it goes, and the session's
		// next run gets a new one.
		defer func() { go s.Destroy(context.Background()) }()
		if ev := process.ReadCgroupEvents(s.cgPath); ev.OOMKills <= cgBefore.OOMKills && ev.PidsMax <= cgBefore.PidsMax {
			return nil, errkind.Errorf(runtime.ErrUnavailable, "run %s: session sandbox %s went down during the run (%v); the session's next run starts a new one", runID, s.spec.ID, run.Err())
		}
		ex = supervisor.Exit{Code: 128 + int(syscall.SIGKILL), Signal: "SIGKILL"}
	}
	reason, ev := process.SessionEndReason(reason, outCap, errCap, s.cgPath, cgBefore)
	res := &runtime.Result{
		ExitCode: ex.Code, Signal: ex.Signal, Reason: reason, Duration: duration,
		Runtime: s.e.name, RuntimeVersion: s.version, Warm: true,
		LimitsEnforcedBy: s.e.d.enforcement(),
	}
	res.Stdout, res.StdoutTruncated = outCap.Result()
	res.Stderr, res.StderrTruncated = errCap.Result()
	outs, err := s.b.CollectChanges(before, lim)
	if err != nil {
		s.e.log.Warn("collecting outputs failed", "id", s.spec.ID, "run_id", runID, "error", err)
		outs = &oci.Outputs{Skipped: []string{"outputs not collected: " + err.Error()}}
	}
	outs.Apply(res)
	s.e.log.Debug("session run finished", "id", s.spec.ID, "run_id", runID, "reason", reason, "exit_code", ex.Code,
		"signal", ex.Signal, "duration", duration, "oom_kills", ev.OOMKills, "pids_max_events", ev.PidsMax)
	return res, nil
}

// stopRun stops a foreground run that its limits or its caller ended: on
// a timeout as on the cold path (TERM to its processes, the kill grace,
// then KILL), else KILL at once. A signal that finds the run ended is no
// failure; a run that is not reported ended after the KILL is.
func (s *sessionSandbox) stopRun(ctx context.Context, run *supervisor.Run, graceful bool) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.e.grace+2*sessionStopWait)
	defer cancel()
	if graceful {
		_ = s.client.Signal(sctx, run.ID(), syscall.SIGTERM)
		select {
		case <-run.Done():
			return nil
		case <-time.After(s.e.grace):
		}
	}
	err := s.client.Signal(sctx, run.ID(), syscall.SIGKILL)
	select {
	case <-run.Done():
		return nil
	case <-time.After(sessionStopWait):
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("the supervisor did not report the end of run %s %s after killing it", run.ID(), sessionStopWait)
}

// runError says why a run could not start: the program is missing (the
// supervisor's message), or the sandbox is gone.
func (s *sessionSandbox) runError(runID string, err error) error {
	if errors.Is(err, supervisor.ErrStart) {
		return errkind.Errorf(runtime.ErrInvalidJob, "run %s: %w", runID, err)
	}
	select {
	case <-s.done:
		return s.gone()
	default:
	}
	return fmt.Errorf("run %s: %w", runID, err)
}

func (s *sessionSandbox) Background(ctx context.Context, runID string, inv runtime.Invocation) (runtime.BackgroundRun, error) {
	req, _, err := s.request(ctx, runID, inv)
	if err != nil {
		return runtime.BackgroundRun{}, err
	}
	req.Background = true
	req.Python = false
	req.Log = runtime.SessionRunsDir + "/" + runID + ".log"
	br := &runtime.BackgroundRun{ID: runID, Log: req.Log, Started: time.Now().UTC(), Running: true,
		LogHost: filepath.Join(s.b.Workdir, path.Base(runtime.SessionStateDir), path.Base(runtime.SessionRunsDir), runID+".log")}
	s.mu.Lock()
	if _, dup := s.bg[runID]; dup {
		s.mu.Unlock()
		return runtime.BackgroundRun{}, errkind.Errorf(runtime.ErrInvalidJob, "run %s exists already in session sandbox %s", runID, s.spec.ID)
	}
	s.bg[runID] = br
	s.mu.Unlock()
	run, err := s.client.Start(ctx, req, nil, nil)
	if err != nil {
		s.mu.Lock()
		delete(s.bg, runID)
		s.mu.Unlock()
		return runtime.BackgroundRun{}, s.runError(runID, err)
	}
	s.mu.Lock()
	br.PID = run.PID()
	out := *br
	s.mu.Unlock()
	go func() {
		select {
		case <-run.Done():
			if run.Err() == nil { // an exit, not the supervisor going away
				s.backgroundExited(runID, run.Exit())
			}
		case <-s.done:
		}
	}()
	return out, nil
}

// backgroundExited records a background run's end (once) and reports it.
func (s *sessionSandbox) backgroundExited(runID string, ex supervisor.Exit) {
	s.mu.Lock()
	br := s.bg[runID]
	if br == nil || !br.Running {
		s.mu.Unlock()
		return
	}
	br.Running, br.ExitCode, br.Signal = false, ex.Code, ex.Signal
	out := *br
	s.mu.Unlock()
	if f := s.spec.OnBackgroundExit; f != nil {
		f(out)
	}
}

func (s *sessionSandbox) Signal(ctx context.Context, runID string, sig syscall.Signal) error {
	s.mu.Lock()
	br := s.bg[runID]
	running := br != nil && br.Running
	s.mu.Unlock()
	if br == nil {
		return errkind.Errorf(runtime.ErrInvalidJob, "no background run %s in session sandbox %s", runID, s.spec.ID)
	}
	if !running {
		return nil // ended already: nothing to signal
	}
	return s.client.Signal(ctx, runID, sig)
}

func (s *sessionSandbox) Runs(context.Context) ([]runtime.BackgroundRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]runtime.BackgroundRun, 0, len(s.bg))
	for _, br := range s.bg {
		out = append(out, *br)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out, nil
}

// Destroy removes the sandbox with all its runs, its cgroup, workdir and
// run dir, with a context of its own.
func (s *sessionSandbox) Destroy(context.Context) error { return s.destroyLocked() }

func (s *sessionSandbox) destroyLocked() error {
	s.mu.Lock()
	frozen := s.frozen
	s.frozen, s.reserved = false, nil
	s.mu.Unlock()
	if frozen {
		// Runs waiting for the thaw find the sandbox gone.
		defer s.fg.Unlock()
	}
	s.destroyOnce.Do(func() {
		s.destroyErr = s.teardown()
		s.e.sessions.Remove(s.spec.ID)
		s.markDone()
	})
	return s.destroyErr
}

func (s *sessionSandbox) teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), process.TeardownTimeout)
	defer cancel()
	var errs []error
	if s.runCmd != nil {
		if err := s.e.cli.delete(ctx, s.spec.ID); err != nil {
			errs = append(errs, err)
		}
	}
	s.lifeCancel()
	if s.client != nil {
		_ = s.client.Close()
	}
	if s.mem != nil {
		_, _, _ = s.mem.Stop()
	}
	if s.runCmd != nil && s.runCmd.Process != nil {
		_ = killGroup(s.runCmd)
	}
	for _, f := range []*os.File{s.initIn, s.initOut, s.initErr} {
		if f != nil {
			_ = f.Close()
		}
	}
	if err := process.ReleaseSandbox(ctx, s.cgPath, nil, s.b, nil); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}

// dirBytes sums the sizes of the regular files in dir (runsc's image dir
// is flat).
func dirBytes(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}
