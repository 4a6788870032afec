package workspace

// A quota bounds what a workspace the daemon keeps (a session's) may
// hold, so that neither a host's writes nor a run's changes fill the
// daemon's disk. It counts the bytes of regular files, found by walking
// the workspace. A walk costs as much as the tree is large, and an upload
// in pieces checks the quota on every piece, so a Workspace keeps the
// count it walked (usageCount) and adds to it what its own writes and
// deletions change; whenever the change is not known exactly, the count
// is dropped and walked again when next needed.

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
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
// itself not counted), found by walking it without following links (every
// call walks; the count kept for the quota is set anew from it). A tree of
// more than MaxUsageEntries entries, or nested deeper than a run's /work
// could be several times over, is an error of kind errkind.LimitExceeded.
func (w *Workspace) Usage() (bytes int64, entries int, err error) {
	root, done, err := w.root()
	if err != nil {
		return 0, 0, err
	}
	defer done()
	return w.walkUsage(root)
}

// usageCount is what a Workspace holds as far as it knows: walked once,
// when a quota first needs it, then kept by the changes the Workspace
// makes itself (WriteAt and Delete add what they changed; an Apply, whose
// change is not counted exactly, drops it). A change made by anything
// else, another Workspace on the same directory or another process, is
// seen once the directory is opened again: hold a Workspace that a quota
// is checked on for one operation, or one upload, not for the life of
// the daemon. A walk that overlapped a change of this Workspace's is used
// once but not kept: it may have counted part of that change.
type usageCount struct {
	mu      sync.Mutex
	known   bool
	bytes   int64
	entries int
	gen     uint64 // bumped when a change begins and when it ends
	busy    int    // changes under way
}

// cachedUsage is what the workspace holds, from the count kept when there
// is one (fresh false) or else walked. A count of more entries than a walk
// may count is walked, so that it fails as a walk would.
func (w *Workspace) cachedUsage(root int) (bytes int64, entries int, fresh bool, err error) {
	c := &w.count
	c.mu.Lock()
	if c.known && c.entries <= usageEntries {
		bytes, entries = c.bytes, c.entries
		c.mu.Unlock()
		return bytes, entries, false, nil
	}
	c.mu.Unlock()
	bytes, entries, err = w.walkUsage(root)
	return bytes, entries, true, err
}

// walkUsage walks the workspace and keeps the count, unless a change of
// this Workspace's overlapped the walk; a failed walk drops it.
func (w *Workspace) walkUsage(root int) (int64, int, error) {
	c := &w.count
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	bytes, entries, err := w.usage(root)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.known = false
	case c.gen == gen && c.busy == 0:
		c.known, c.bytes, c.entries = true, bytes, entries
	}
	return bytes, entries, err
}

// treeChange is one change of the tree by the Workspace: begun (at most
// once) just before the tree is first changed, ended once done, adding
// bytes and entries to the count when exact, else dropping it.
type treeChange struct {
	w       *Workspace
	begun   bool
	exact   bool
	bytes   int64
	entries int
}

func (t *treeChange) begin() {
	if t.begun {
		return
	}
	t.begun = true
	c := &t.w.count
	c.mu.Lock()
	c.gen++
	c.busy++
	c.mu.Unlock()
}

func (t *treeChange) end() {
	if !t.begun {
		return
	}
	c := &t.w.count
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.busy--
	if !c.known {
		return
	}
	c.bytes += t.bytes
	c.entries += t.entries
	if !t.exact || c.bytes < 0 || c.entries < 0 {
		c.known = false
	}
}

func (w *Workspace) usage(root int) (int64, int, error) {
	fd, err := openDirAt(root, ".")
	if err != nil {
		return 0, 0, errkind.Errorf(errkind.Unavailable, "workspace %s: %w", w.dir, err)
	}
	defer unix.Close(fd)
	u := &usage{w: w}
	if err := walkDir(fd, ".", 1, u); err != nil {
		return 0, 0, err
	}
	return u.bytes, u.entries, nil
}

type usage struct {
	w       *Workspace
	bytes   int64
	entries int
}

// entry counts one entry, and says whether to count what is under it.
func (u *usage) entry(_ int, _, rel string, st *unix.Stat_t, depth int) (bool, error) {
	u.entries++
	if u.entries > usageEntries {
		return false, errkind.Errorf(errkind.LimitExceeded, "workspace %s holds more than %d entries, too many to count its size: delete files or directories it no longer needs", u.w.dir, usageEntries)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		u.bytes += st.Size
	case unix.S_IFDIR:
		if depth+1 > maxUsageDepth {
			return false, errkind.Errorf(errkind.LimitExceeded, "workspace %s is nested more than %d levels deep, at %s: its size is not counted; delete what lies that deep", u.w.dir, maxUsageDepth, runtime.QuoteName(rel))
		}
		return true, nil
	}
	return false, nil
}

func (u *usage) failed(op, rel string, err error) error {
	var r *refusal
	if op == "open" && (errors.As(err, &r) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) {
		return nil // swapped or removed since it was looked at
	}
	return errkind.Errorf(errkind.Unavailable, "workspace %s: %s %s: %w", u.w.dir, op, runtime.QuoteName(rel), err)
}

// overQuota says why a write of growth bytes is refused by quota, given
// used ("" if it is not).
func overQuota(quota, used, growth int64) string {
	if quota <= 0 || growth <= 0 || used+growth <= quota {
		return ""
	}
	return fmt.Sprintf("would take the workspace to %d bytes, over its quota of %d bytes (it holds %d)", used+growth, quota, used)
}
