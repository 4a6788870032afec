package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Sweeper is implemented by backends that can clean up after a crash.
type Sweeper interface {
	Sweep(ctx context.Context) error
}

// Sweep removes what runs of rt left behind when the process driving them
// died (daemon crash, kill -9, power loss of /run is moot): containers in the
// backend's state dir whose id starts with IDPrefix, run dirs with their
// workdir mounts, and the runs' cgroups. Runs still in progress, in this
// process or another (`skillbox run` next to the daemon), hold a lock on
// their run dir and are left alone. The daemon calls it once at start.
// Backends that keep no local state (none yet) need not implement Sweeper.
func Sweep(ctx context.Context, rt Runtime) error {
	s, ok := rt.(Sweeper)
	if !ok {
		return nil
	}
	return s.Sweep(ctx)
}

// sweepMinAge protects a run dir made a moment ago but not yet locked.
const sweepMinAge = 2 * time.Second

func (e *engine) sweep(ctx context.Context) error {
	if _, err := e.cli.lookup(); err != nil {
		return err
	}
	var errs []error
	list, err := e.cli.list(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, c := range list {
		if !strings.HasPrefix(c.ID, IDPrefix) || !jobIDPattern.MatchString(c.ID) {
			continue
		}
		dir := filepath.Join(e.runDir, c.ID)
		if e.live(dir) {
			continue
		}
		// The list may be stale by now (earlier deletes can take seconds):
		// a run that ended meanwhile has removed its container itself.
		if _, err := e.cli.state(ctx, c.ID); err != nil && isNotExist(err) {
			continue
		}
		e.log.Info("removing leftover container", "id", c.ID, "status", c.Status)
		if err := e.deleteRetry(ctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}

	entries, err := os.ReadDir(e.runDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("read run dir: %w", err))
	}
	for _, ent := range entries {
		id := ent.Name()
		if !ent.IsDir() || !jobIDPattern.MatchString(id) {
			continue
		}
		if err := e.sweepRunDir(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}

	// Cgroups of runs whose run dir is already gone.
	for _, parent := range cgroupDirs(CgroupParent) {
		kids, _ := os.ReadDir(parent)
		for _, k := range kids {
			id := k.Name()
			if !k.IsDir() || !strings.HasPrefix(id, IDPrefix) || !jobIDPattern.MatchString(id) {
				continue
			}
			if e.live(filepath.Join(e.runDir, id)) {
				continue
			}
			if err := removeCgroupDir(filepath.Join(parent, id)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// live reports whether a run dir belongs to a run in progress.
func (e *engine) live(dir string) bool {
	st, err := os.Lstat(dir)
	if err != nil {
		return false
	}
	if time.Since(st.ModTime()) < sweepMinAge {
		return true
	}
	f, err := lockDir(dir, true)
	if err != nil {
		return errors.Is(err, errLocked)
	}
	f.Close()
	return false
}

// sweepRunDir removes one stale run dir: its container (if this backend
// made it), workdir mount, cgroup and files.
func (e *engine) sweepRunDir(ctx context.Context, id string) error {
	dir := filepath.Join(e.runDir, id)
	st, err := os.Lstat(dir)
	if err != nil || time.Since(st.ModTime()) < sweepMinAge {
		return nil
	}
	lock, err := lockDir(dir, true)
	if errors.Is(err, errLocked) {
		return nil
	}
	if err != nil {
		return err
	}
	defer lock.Close()
	e.log.Info("removing leftover run dir", "id", id, "dir", dir)
	var errs []error
	if strings.HasPrefix(id, IDPrefix) {
		if err := e.deleteRetry(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmount(filepath.Join(dir, bundleWorkdir)); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroupRetry(ctx, CgroupParent+"/"+id); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove run dir: %w", err))
	}
	return errors.Join(errs...)
}

// deleteRetry retries delete --force a few times. After a crash the killed
// sandbox or container init is an orphan that only the host's init can
// reap; until it does, the runtime sees it alive and its delete times out.
func (e *engine) deleteRetry(ctx context.Context, id string) error {
	var err error
	for i := 0; i < sweepDeleteTries; i++ {
		if err = e.cli.delete(ctx, id); err == nil {
			return nil
		}
		e.log.Debug("delete of leftover container failed; retrying", "id", id, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
	return err
}

const sweepDeleteTries = 5
