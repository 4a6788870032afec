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
	"strconv"
	"sync"

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

	destroyed process.DestroyOnce
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
	return s.destroyed.Do(func() error {
		defer s.markDone()
		defer s.e.sessions.Remove(s.spec.ID)
		return s.teardown()
	})
}

func (s *sessionSandbox) teardown() error {
	ctx, cancel := process.TeardownContext()
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
