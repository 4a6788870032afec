package workspace

import (
	"errors"
	"path"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/policy/glob"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// WriteAt writes data (at most api.MaxWorkspaceChunk bytes) into the
// regular file rel at off, which may not lie past the file's end (no
// holes); a file is uploaded in pieces by writing each at the end of the
// last. With truncate (only with off 0) the file starts over, created when
// missing (mode perm, 0644 when 0; an existing file keeps its mode unless
// perm is given) with its missing parent directories (0755), never through
// a link; without it the file must exist. A symlink, directory or special
// file in the way, a hard-linked file and an excluded path (o.Excludes)
// are refused. With o.Quota the bytes the workspace would hold after the
// write may not exceed it (errkind.LimitExceeded, naming the quota and what
// is used). What it creates belongs to o.Owner when set. It returns the
// file's size after the write.
func (w *Workspace) WriteAt(rel string, off int64, data []byte, truncate bool, perm uint32, o Options) (int64, error) {
	rel, err := filesPath(rel, false, false)
	if err != nil {
		return 0, err
	}
	q := runtime.QuoteName(rel)
	switch {
	case len(data) > api.MaxWorkspaceChunk:
		return 0, errkind.Errorf(errkind.LimitExceeded, "%d bytes for %s in one write, at most %d: write the file in pieces, each at the end of the last", len(data), q, api.MaxWorkspaceChunk)
	case off < 0:
		return 0, errkind.Errorf(errkind.InvalidParams, "offset %d of %s is negative: write from 0 or later", off, q)
	case truncate && off != 0:
		return 0, errkind.Errorf(errkind.InvalidParams, "truncate starts %s over, from offset 0, not %d: truncate with offset 0, then write each piece at the end of the last", q, off)
	case perm&^0o777 != 0:
		return 0, errkind.Errorf(errkind.InvalidParams, "mode %#o of %s has bits other than permissions: give at most 0777 (0: 0644)", perm, q)
	}
	if err := checkExcluded(rel, o, "written"); err != nil {
		return 0, err
	}
	if o.Quota > 0 || o.Account != nil {
		w.quotaMu.Lock()
		defer w.quotaMu.Unlock()
	}
	root, done, err := w.root()
	if err != nil {
		return 0, err
	}
	defer done()

	// The growth taken from o.Account for this write: given back, or
	// made what the write changed, when it is over.
	var res *Reservation
	var delta int64 // what the write changed the workspace's bytes by
	defer func() {
		if o.Account == nil {
			return
		}
		if res == nil {
			res, _ = o.Account.Reserve(0)
		}
		res.Done(delta)
	}()
	quota := func(before, after int64) error {
		if after <= before {
			return nil
		}
		if err := w.checkQuota(root, q, o.Quota, after-before); err != nil {
			return err
		}
		if o.Account == nil {
			return nil
		}
		res.Done(0) // taken before, for a path that changed since
		r, err := o.Account.Reserve(after - before)
		if errors.Is(err, errkind.LimitExceeded) {
			return errkind.Errorf(errkind.LimitExceeded, "writing %s %s", q, errkind.Detail(err, errkind.LimitExceeded))
		}
		if err != nil {
			return err
		}
		res = r
		return nil
	}
	// What the write changes, kept in the count; exact once it is done.
	chg := &treeChange{w: w}
	defer chg.end()

	dir, name := path.Dir(rel), path.Base(rel)
	dirfd, err := openDir(root, dir, false, nil)
	if err != nil && truncate && errors.Is(err, unix.ENOENT) {
		// A new file in new directories: counted before anything is made.
		if err := quota(0, int64(len(data))); err != nil {
			return 0, err
		}
		chg.begin()
		dirfd, err = openDir(root, dir, true, o.Owner)
	}
	madeDirs := chg.begun // how many is not counted: the count is dropped
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, errkind.Errorf(errkind.NotFound, "%s does not exist in the workspace: write its first piece with truncate (offset 0), which creates it", q)
		}
		return 0, w.pathErr(rel, "write", err)
	}
	defer unix.Close(dirfd)

	var fd int
	var before int64 // the file's size before the write
	created := false
	for attempt := 0; ; attempt++ {
		var st unix.Stat_t
		err := lstatAt(dirfd, name, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			if !truncate {
				return 0, errkind.Errorf(errkind.NotFound, "%s does not exist in the workspace: write its first piece with truncate (offset 0), which creates it", q)
			}
			if err := quota(0, int64(len(data))); err != nil {
				return 0, err
			}
			chg.begin()
			mode := perm
			if mode == 0 {
				mode = 0o644
			}
			fd, err = retry(func() (int, error) {
				return unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			})
			if errors.Is(err, unix.EEXIST) && attempt < 3 {
				continue // made meanwhile: look again
			}
			if err != nil {
				return 0, w.ioErr(rel, "write", err)
			}
			created = true
			if err := setupNew(fd, mode, o.Owner); err != nil {
				unix.Close(fd)
				unix.Unlinkat(dirfd, name, 0)
				return 0, w.ioErr(rel, "write", err)
			}
		case err != nil:
			return 0, w.ioErr(rel, "write", err)
		default:
			if err := regularOnly(rel, &st, "write"); err != nil {
				return 0, err
			}
			if off > st.Size {
				return 0, errkind.Errorf(errkind.InvalidParams, "offset %d is past the end of %s, which is %d bytes: write at %d to append (files have no holes)", off, q, st.Size, st.Size)
			}
			after := max(st.Size, off+int64(len(data)))
			if truncate {
				after = int64(len(data))
			}
			if err := quota(st.Size, after); err != nil {
				return 0, err
			}
			chg.begin()
			before = st.Size
			fd, err = openWritableAt(dirfd, name, &st)
			if err != nil {
				return 0, w.ioErr(rel, "write", err)
			}
			if truncate && perm != 0 {
				if err := unix.Fchmod(fd, perm); err != nil {
					unix.Close(fd)
					return 0, w.ioErr(rel, "write", err)
				}
			}
		}
		break
	}
	defer unix.Close(fd)
	fail := func(err error) (int64, error) {
		if created {
			unix.Unlinkat(dirfd, name, 0)
		} else if st, serr := fstat(fd); serr == nil {
			delta = st.Size - before // written or truncated in part
		}
		return 0, w.ioErr(rel, "write", err)
	}
	if truncate && !created {
		if err := unix.Ftruncate(fd, 0); err != nil {
			return fail(err)
		}
	}
	for b, at := data, off; len(b) > 0; {
		n, err := retry(func() (int, error) { return unix.Pwrite(fd, b, at) })
		if err != nil {
			return fail(err)
		}
		b, at = b[n:], at+int64(n)
	}
	if err := unix.Fsync(fd); err != nil {
		return fail(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(err)
	}
	chg.exact, chg.bytes = !madeDirs, st.Size-before
	delta = st.Size - before
	if created {
		chg.entries = 1
	}
	return st.Size, nil
}

// checkQuota refuses growth bytes more in the workspace where they would
// take it over quota (0: none), naming the file q being written.
func (w *Workspace) checkQuota(root int, q string, quota, growth int64) error {
	if quota <= 0 || growth <= 0 {
		return nil
	}
	used, _, fresh, err := w.cachedUsage(root)
	if err != nil {
		return err
	}
	why := overQuota(quota, used, growth)
	if why != "" && !fresh {
		// Refused by the count kept: walked again, to be sure.
		if used, _, err = w.walkUsage(root); err != nil {
			return err
		}
		why = overQuota(quota, used, growth)
	}
	if why != "" {
		return errkind.Errorf(errkind.LimitExceeded, "writing %s %s: delete files it no longer needs, or write less", q, why)
	}
	return nil
}

// setupNew gives a file just made its mode (whatever the umask) and owner.
func setupNew(fd int, mode uint32, owner *Owner) error {
	if owner != nil {
		if err := unix.Fchown(fd, owner.UID, owner.GID); err != nil {
			return err
		}
	}
	return unix.Fchmod(fd, mode)
}

func fstat(fd int) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// openWritableAt opens name in dirfd for writing if it is the regular,
// singly linked file want (an lstat of it) still: never through a
// symlink, never blocking on a FIFO swapped in meanwhile.
func openWritableAt(dirfd int, name string, want *unix.Stat_t) (int, error) {
	fd, err := retry(func() (int, error) {
		return unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		if errors.Is(err, unix.ENXIO) { // a FIFO without a reader
			return -1, refusef("changed while it was written; try again")
		}
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != want.Dev || st.Ino != want.Ino || st.Nlink != 1 {
		unix.Close(fd)
		return -1, refusef("changed while it was written; try again")
	}
	// Regular files ignore O_NONBLOCK.
	return fd, nil
}

// checkExcluded refuses rel where one of o's exclude patterns matches it
// or a directory above it.
func checkExcluded(rel string, o Options, verb string) error {
	excludes, err := o.excludes()
	if err != nil {
		return err
	}
	for _, p := range glob.CompileAll(excludes) {
		if p.Match(rel, true, true) {
			return errkind.Errorf(errkind.Denied, "%s is excluded by the pattern %q of the workspace's excludes; it is never %s", runtime.QuoteName(rel), p.String(), verb)
		}
	}
	return nil
}
