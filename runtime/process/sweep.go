package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/oci"
	"golang.org/x/sys/unix"
)

// Sweeper is one Sweep of one backend. What it does to the host is in
// function fields so that the liveness logic can be tested without root, a
// runtime CLI or cgroups.
type Sweeper struct {
	runDir string
	log    runtime.Logger
	// list returns the containers in the backend's state dir; state one of
	// them (an error that IsNotExist recognises if there is none); delete
	// removes one (not existing is no error).
	list   func(ctx context.Context) ([]ContainerState, error)
	state  func(ctx context.Context, id string) (*ContainerState, error)
	delete func(ctx context.Context, id string) error
	// unmount detaches the workdir tmpfs of a dead run.
	unmount func(target string) error
	// killCgroup SIGKILLs the processes left in a dead run's cgroup;
	// removeCgroup removes a cgroup in which no process is left (it never
	// kills).
	killCgroup   func(ctx context.Context, cgPath string) error
	removeCgroup func(ctx context.Context, cgPath string) error
	// endWatchdog ends the watchdog a dead run may have left waiting for
	// its deadline (nil: none to end).
	endWatchdog func(id string)
	// removeNetns removes a dead run's egress namespaces (none is no
	// error); nil skips that step.
	removeNetns func(ctx context.Context, id string) error
}

// NewSweeper is a sweeper over runDir with the host's own unmount, cgroup,
// watchdog and network-namespace steps and a backend's container ops.
func NewSweeper(runDir string, log runtime.Logger, ops SweepOps) *Sweeper {
	return &Sweeper{
		runDir:       runDir,
		log:          log,
		list:         ops.List,
		state:        ops.State,
		delete:       ops.Delete,
		unmount:      oci.Unmount,
		killCgroup:   killCgroupProcs,
		removeCgroup: removeCgroupRetry,
		endWatchdog:  endWatchdogs,
		removeNetns:  egress.RemoveNamespaces,
	}
}

func (s *Sweeper) Sweep(ctx context.Context) error {
	var errs []error
	// The containers first: a run makes (and locks) its run dir before its
	// container, so a container listed now whose run dir is missing below
	// is not one of a run being set up.
	list, err := s.list(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	entries, err := os.ReadDir(s.runDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("read run dir: %w", err))
	}
	withDir := map[string]bool{}
	for _, ent := range entries {
		name := ent.Name()
		switch {
		case !ent.IsDir():
		case strings.HasPrefix(name, oci.PrepPrefix):
			if err := s.sweepPrepDir(name); err != nil {
				errs = append(errs, err)
			}
		case runtime.JobIDPattern.MatchString(name):
			found, err := s.sweepRunDir(ctx, name)
			if err != nil {
				errs = append(errs, err)
			}
			withDir[name] = found
		}
	}
	for _, c := range list {
		if withDir[c.ID] {
			continue // left alive, or removed with its run dir
		}
		if err := s.sweepContainer(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sweepRunDir removes the run dir RunDir/id, with its container, workdir
// mount and cgroup, unless its run is alive. found is false when the dir
// was gone by the time Sweep came to lock it.
func (s *Sweeper) sweepRunDir(ctx context.Context, id string) (found bool, err error) {
	dir := filepath.Join(s.runDir, id)
	lock, err := oci.LockDir(dir, true)
	switch {
	case errors.Is(err, oci.ErrLocked):
		return true, nil // a live run
	case errors.Is(err, os.ErrNotExist):
		return false, nil // its run ended meanwhile
	case err != nil:
		return true, err
	}
	defer lock.Close()
	if !oci.SamePath(lock, dir) {
		return false, nil // the run ended (and removed it) before we locked it
	}
	// Holding the lock, the run is dead and stays so: its process died, and
	// the runtime CLI that could still have made its container was killed
	// in the same exit (ocicli's startTied).
	s.log.Info("removing leftover run dir", "id", id, "dir", dir)
	var errs []error
	owned := true
	st, err := s.state(ctx, id)
	switch {
	case err == nil && st.Bundle != "" && !bundleIs(st.Bundle, dir):
		// A container of that name made from another bundle is not this
		// run's; nor, then, is the cgroup of that name.
		s.log.Warn("a container named like a dead run has another bundle; leaving it and its cgroup",
			"id", id, "bundle", st.Bundle, "run_dir", dir)
		owned = false
	case err != nil && IsNotExist(err):
		// The run died before its container was made, after it was
		// deleted, or while its CLI was making it: runc then leaves a state
		// dir without state.json, which state and list do not show and
		// only delete --force removes.
		if err := s.delete(ctx, id); err != nil && !IsNotExist(err) {
			errs = append(errs, err)
		}
	default:
		// It exists, or state failed (half-written state of a CLI killed
		// while creating it): delete --force copes with both.
		if err := s.delete(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if owned {
		cg := oci.CgroupParent + "/" + id
		// What the runtime could not delete: processes of a container whose
		// CLI died before it recorded its state.
		if err := s.killCgroup(ctx, cg); err != nil {
			errs = append(errs, err)
		}
		if err := s.removeCgroup(ctx, cg); err != nil {
			errs = append(errs, err)
		}
		if s.removeNetns != nil {
			if err := s.removeNetns(ctx, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := s.unmount(filepath.Join(dir, oci.BundleWorkdir)); err != nil {
		errs = append(errs, err)
	}
	if s.endWatchdog != nil {
		// The run is gone now; its watchdog has nothing left to guard.
		s.endWatchdog(id)
	}
	if note := readNote(filepath.Join(dir, oci.BundleWatchdogLog)); note != "" {
		s.log.Warn("the dead run's watchdog acted", "id", id, "watchdog", note)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove run dir: %w", err))
	}
	return true, errors.Join(errs...)
}

// sweepContainer removes a container of the state dir that has no run dir
// (its run's teardown failed to delete it). It must carry IDPrefix and have
// been made from the bundle RunDir/<id>; then its cgroup goes too, if
// nothing runs in it.
func (s *Sweeper) sweepContainer(ctx context.Context, c ContainerState) error {
	if !strings.HasPrefix(c.ID, runtime.IDPrefix) || !runtime.JobIDPattern.MatchString(c.ID) {
		return nil
	}
	dir := filepath.Join(s.runDir, c.ID)
	if !bundleIs(c.Bundle, dir) {
		// Another RunDir's run sharing our state dir: not ours to judge.
		s.log.Debug("leaving a container of another run dir", "id", c.ID, "bundle", c.Bundle)
		return nil
	}
	if _, err := os.Lstat(dir); err == nil {
		return nil // a run dir appeared: the next Sweep judges it by its lock
	}
	// The list may be stale by now (earlier deletes can take seconds): a
	// run that ended meanwhile has removed its container itself.
	st, err := s.state(ctx, c.ID)
	if err != nil {
		if IsNotExist(err) {
			return nil
		}
		return err
	}
	if !bundleIs(st.Bundle, dir) {
		return nil
	}
	s.log.Info("removing leftover container", "id", c.ID, "status", st.Status)
	if err := s.delete(ctx, c.ID); err != nil {
		return err
	}
	if s.endWatchdog != nil {
		s.endWatchdog(c.ID)
	}
	// Not killCgroup: rmdir fails on a cgroup with processes, and only an
	// empty one is removed.
	return s.removeCgroup(ctx, oci.CgroupParent+"/"+c.ID)
}

// sweepPrepDir removes a temporary run dir (see oci.MakeRunDir) that a process
// died with before renaming it. One that is locked is being made now.
func (s *Sweeper) sweepPrepDir(name string) error {
	p := filepath.Join(s.runDir, name)
	if oci.PrepMakerAlive(name) {
		return nil // being made right now (unlocked until its maker flocks it)
	}
	lock, err := oci.LockDir(p, true)
	switch {
	case errors.Is(err, oci.ErrLocked), errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	defer lock.Close()
	if !oci.SamePath(lock, p) {
		return nil // renamed into place meanwhile
	}
	// Empty: nothing is put in it before the rename. A full one is not one
	// of ours; leave it.
	if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove temporary run dir", Path: p, Err: err}
	}
	return nil
}

// bundleIs reports whether a container's bundle is dir. Both runtimes
// report it; an empty one (a state too broken to tell) is not attributed.
func bundleIs(bundle, dir string) bool {
	return bundle != "" && filepath.Clean(bundle) == dir
}

// readNote reads a short text file a run left (at most 4 KiB), or "".
func readNote(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 4<<10)
	n, _ := io.ReadFull(f, b)
	return strings.TrimSpace(string(b[:n]))
}

// ContainerState is one entry of `state` / `list --format=json`.
type ContainerState struct {
	ID      string `json:"id"`
	Pid     int    `json:"pid"`
	Status  string `json:"status"`
	Bundle  string `json:"bundle"`
	Created string `json:"created,omitempty"`
}

// IsNotExist recognises the "no such container" errors of the OCI CLIs and
// of containerd ("not found").
func IsNotExist(err error) bool {
	if err == nil {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "does not exist") || strings.Contains(s, "not exist") ||
		strings.Contains(s, "no such") || strings.Contains(s, "not found")
}

// SweepOps are what a backend outside this package gives Sweep about its
// containers: List the ones it knows (Bundle is the run dir each was made
// for), State of one (an error IsNotExist recognises when there is none),
// Delete one with everything it holds (not existing is no error).
type SweepOps struct {
	List   func(ctx context.Context) ([]ContainerState, error)
	State  func(ctx context.Context, id string) (*ContainerState, error)
	Delete func(ctx context.Context, id string) error
}
