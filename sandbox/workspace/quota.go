package workspace

// A quota bounds what a workspace the daemon keeps (a session's) may
// hold, so that neither a host's writes nor a run's changes fill the
// daemon's disk. It counts the bytes of regular files, found by walking
// the workspace: there is no other record that could drift from it.

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// MaxUsageEntries bounds the walk of Usage: a workspace with more entries
// is an error rather than a long walk.
const MaxUsageEntries = 10 * DefaultFiles

// usageEntries is MaxUsageEntries (lowered by tests).
var usageEntries = MaxUsageEntries

// maxUsageDepth bounds how deep the walk of Usage goes (an open directory
// per level); a deeper tree is an error, never an undercount.
const maxUsageDepth = 4 * runtime.MaxInputDepth

// Usage is what the workspace holds: the bytes of its regular files and
// its entries (files, directories, links, anything else; the workspace
// itself not counted), found by walking it without following links. A
// tree of more than MaxUsageEntries entries, or nested deeper than a run's
// /work could be several times over, is an error of kind
// api.ErrLimitExceeded.
func (w *Workspace) Usage() (bytes int64, entries int, err error) {
	root, done, err := w.root()
	if err != nil {
		return 0, 0, err
	}
	defer done()
	return w.usage(root)
}

func (w *Workspace) usage(root int) (int64, int, error) {
	fd, err := openDirAt(root, ".")
	if err != nil {
		return 0, 0, errkind.Errorf(api.ErrUnavailable, "workspace %s: %w", w.dir, err)
	}
	defer unix.Close(fd)
	u := &usage{w: w}
	if err := u.walk(fd, ".", 1); err != nil {
		return 0, 0, err
	}
	return u.bytes, u.entries, nil
}

type usage struct {
	w       *Workspace
	bytes   int64
	entries int
}

func (u *usage) walk(dirfd int, rel string, depth int) error {
	if depth > maxUsageDepth {
		return errkind.Errorf(api.ErrLimitExceeded, "workspace %s is nested more than %d levels deep, at %s: its size is not counted; delete what lies that deep", u.w.dir, maxUsageDepth, runtime.QuoteName(rel))
	}
	names, err := readDirNames(dirfd)
	if err != nil {
		return errkind.Errorf(api.ErrUnavailable, "workspace %s: read directory %s: %w", u.w.dir, runtime.QuoteName(rel), err)
	}
	for _, name := range names {
		child := name
		if rel != "." {
			child = rel + "/" + name
		}
		var st unix.Stat_t
		if err := lstatAt(dirfd, name, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return errkind.Errorf(api.ErrUnavailable, "workspace %s: lstat %s: %w", u.w.dir, runtime.QuoteName(child), err)
		}
		u.entries++
		if u.entries > usageEntries {
			return errkind.Errorf(api.ErrLimitExceeded, "workspace %s holds more than %d entries, too many to count its size: delete files or directories it no longer needs", u.w.dir, usageEntries)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			u.bytes += st.Size
		case unix.S_IFDIR:
			fd, err := openSameDir(dirfd, name, &st)
			if err != nil {
				var r *refusal
				if errors.As(err, &r) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
					continue // swapped or removed since it was looked at
				}
				return errkind.Errorf(api.ErrUnavailable, "workspace %s: open %s: %w", u.w.dir, runtime.QuoteName(child), err)
			}
			err = u.walk(fd, child, depth+1)
			unix.Close(fd)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// overQuota says why a write of growth bytes is refused by quota, given
// used ("" if it is not).
func overQuota(quota, used, growth int64) string {
	if quota <= 0 || growth <= 0 || used+growth <= quota {
		return ""
	}
	return fmt.Sprintf("would take the workspace to %d bytes, over its quota of %d bytes (it holds %d)", used+growth, quota, used)
}
