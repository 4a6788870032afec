package ocicli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/checkpoint"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/runtime/process"
)

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
