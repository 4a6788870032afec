package workspace

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Delete removes the file, symlink (never followed) or special file rel,
// or the directory rel: an empty one, or with recursive one with all that
// is under it, every directory opened from its parent's descriptor
// without following links (a subdirectory swapped for a link meanwhile
// has the link removed, never what it points to). rel "" or "." (the
// workspace itself) is refused. It returns how many entries were removed,
// also when it fails part way.
func (w *Workspace) Delete(rel string, recursive bool) (int, error) {
	return w.DeleteAccounted(rel, recursive, nil)
}

// DeleteAccounted is Delete, giving the bytes of the regular files it
// removes back to acct (nil: none), also when it fails part way.
func (w *Workspace) DeleteAccounted(rel string, recursive bool, acct *Account) (int, error) {
	var freed int64
	if acct != nil {
		defer func() { acct.Add(-freed) }()
	}
	rel, err := filesPath(rel, false, true)
	if err != nil {
		return 0, err
	}
	root, done, err := w.root()
	if err != nil {
		return 0, err
	}
	defer done()
	dirfd, name, err := w.parentOf(root, rel, "delete")
	if err != nil {
		return 0, err
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := lstatAt(dirfd, name, &st); err != nil {
		return 0, w.ioErr(rel, "delete", err)
	}
	// What the deletion changes, kept in the count: exact for one entry;
	// what a recursive one removed is not counted (the count is dropped).
	chg := &treeChange{w: w}
	defer chg.end()
	chg.begin()
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unlinkAny(dirfd, name); err != nil {
			return 0, w.ioErr(rel, "delete", err)
		}
		chg.exact, chg.entries = true, -1
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			chg.bytes = -st.Size
			freed = st.Size
		}
		return 1, nil
	}
	removed := 0
	if recursive {
		fd, err := openSameDir(dirfd, name, &st)
		if err != nil {
			return 0, w.ioErr(rel, "delete", err)
		}
		err = w.removeAll(fd, rel, 1, &removed, &freed)
		unix.Close(fd)
		if err != nil {
			return removed, err
		}
	}
	if _, err := retry(func() (int, error) { return 0, unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR) }); err != nil {
		if !recursive && (errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)) {
			return 0, errkind.Errorf(errkind.InvalidParams, "%s is a directory that is not empty: delete it with recursive to remove it and everything under it", runtime.QuoteName(rel))
		}
		return removed, w.ioErr(rel, "delete", err)
	}
	chg.exact, chg.entries = !recursive, -1
	return removed + 1, nil
}

// removeAll removes everything in the directory dirfd (rel, depth levels
// below the one Delete was given), counting into removed, and the bytes
// of the regular files removed into freed.
func (w *Workspace) removeAll(dirfd int, rel string, depth int, removed *int, freed *int64) error {
	if depth > maxDeleteDepth {
		return errkind.Errorf(errkind.LimitExceeded, "%s is nested more than %d levels deep: delete it in parts, from its deepest directories", runtime.QuoteName(rel), maxDeleteDepth)
	}
	names, err := readDirNames(dirfd)
	if err != nil {
		return w.ioErr(rel, "delete", err)
	}
	for _, name := range names {
		child := rel + "/" + name
		if w.raced != nil {
			w.raced(child)
		}
		fd, err := openDirAt(dirfd, name)
		switch {
		case err == nil:
			err = w.removeAll(fd, child, depth+1, removed, freed)
			unix.Close(fd)
			if err != nil {
				return err
			}
			_, err = retry(func() (int, error) { return 0, unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR) })
		case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			// Not a directory (a symlink is not followed): unlinked.
			var st unix.Stat_t
			size := int64(0)
			if lstatAt(dirfd, name, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				size = st.Size
			}
			if err = unlinkAny(dirfd, name); err == nil {
				*freed += size
			}
		}
		if errors.Is(err, unix.ENOENT) {
			continue // removed meanwhile
		}
		if err != nil {
			return w.ioErr(child, "delete", err)
		}
		*removed++
	}
	return nil
}
