package workspace

// The files API on a workspace (a session's, which the daemon keeps): a
// host lists, reads and writes its files in pieces and deletes them, under
// the same rules as a Snapshot and an Apply: every path resolved beneath
// the open directory one component at a time with O_NOFOLLOW, no symlink
// ever followed, no special file ever opened in a way that could block, no
// hard-linked file read or written (it may be the same file as one outside
// the workspace).

import (
	"errors"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/policy/glob"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// maxDeleteDepth bounds how deep a recursive Delete goes (an open
// directory per level).
const maxDeleteDepth = 4 * runtime.MaxInputDepth

// List returns the entries of the directory rel ("" or "." the workspace
// itself), or with recursive all of the tree below it, in path order
// (compared component by component: a directory comes right before what
// is under it, siblings by name), at most limit of them (<= 0 or over
// api.MaxWorkspaceList: api.MaxWorkspaceList); truncated says more were
// left out. Symlinks are listed as symlinks with their target, never
// followed; FIFOs, sockets and devices as "other". A walk goes no deeper
// than a run's /work may (runtime.MaxInputDepth).
func (w *Workspace) List(rel string, recursive bool, limit int) (entries []api.WorkspaceEntry, truncated bool, err error) {
	rel, err = filesPath(rel, true, true)
	if err != nil {
		return nil, false, err
	}
	if limit <= 0 || limit > api.MaxWorkspaceList {
		limit = api.MaxWorkspaceList
	}
	root, done, err := w.root()
	if err != nil {
		return nil, false, err
	}
	defer done()
	fd, err := openDir(root, rel, false, nil)
	if err != nil {
		return nil, false, w.pathErr(rel, "list", err)
	}
	defer unix.Close(fd)
	l := &lister{w: w, recursive: recursive, limit: limit, entries: []api.WorkspaceEntry{}}
	depth := 1
	if rel != "." {
		depth = strings.Count(rel, "/") + 2
	}
	if err := walkDir(fd, rel, depth, l); err != nil && !errors.Is(err, errListFull) {
		return nil, false, err
	}
	return l.entries, l.truncated, nil
}

var errListFull = errors.New("list full")

// lister is one List under way.
type lister struct {
	w         *Workspace
	recursive bool
	limit     int
	entries   []api.WorkspaceEntry
	truncated bool
}

// entry lists one entry, and says whether to list what is under it.
func (l *lister) entry(dirfd int, name, rel string, st *unix.Stat_t, depth int) (bool, error) {
	if len(l.entries) == l.limit {
		l.truncated = true
		return false, errListFull
	}
	l.entries = append(l.entries, entryOf(dirfd, name, rel, st))
	return l.recursive && st.Mode&unix.S_IFMT == unix.S_IFDIR && depth < runtime.MaxInputDepth, nil
}

func (l *lister) failed(op, rel string, err error) error {
	switch op {
	case "read directory":
		if denied(err) {
			return errkind.Errorf(errkind.Denied, "workspace %s: directory %s cannot be read: permission denied on the host", l.w.dir, runtime.QuoteName(rel))
		}
		return errkind.Errorf(errkind.Unavailable, "workspace %s: read directory %s: %w", l.w.dir, runtime.QuoteName(rel), err)
	case "open":
		return nil // changed since it was looked at, or unreadable: listed, not entered
	}
	return l.w.ioErr(rel, "list", err)
}

// visitor is what a walk of the workspace (walkDir) does: List's and
// Usage's.
type visitor interface {
	// entry sees the entry name of dirfd, rel in the workspace, lstat'ed
	// as st, depth components deep; enter says to walk what is under it
	// (a directory).
	entry(dirfd int, name, rel string, st *unix.Stat_t, depth int) (enter bool, err error)
	// failed is the error the walk ends with when op ("read directory",
	// "lstat", "open") failed on rel; nil passes rel over.
	failed(op, rel string, err error) error
}

var (
	_ visitor = (*lister)(nil)
	_ visitor = (*usage)(nil)
)

// walkDir walks the directory dirfd, rel in the workspace, whose entries
// are depth components deep: each entry, in name order and lstat'ed
// without following links, goes to v, and a directory v enters is walked
// in turn if it is still the one lstat'ed. An entry removed since the
// directory was read is passed over.
func walkDir(dirfd int, rel string, depth int, v visitor) error {
	names, err := readDirNames(dirfd)
	if err != nil {
		return v.failed("read directory", rel, err)
	}
	for _, name := range names {
		child := name
		if rel != "." {
			child = rel + "/" + name
		}
		var st unix.Stat_t
		if err := lstatAt(dirfd, name, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed since the directory was read
			}
			if err := v.failed("lstat", child, err); err != nil {
				return err
			}
			continue
		}
		enter, err := v.entry(dirfd, name, child, &st, depth)
		if err != nil {
			return err
		}
		if !enter {
			continue
		}
		fd, err := openSameDir(dirfd, name, &st)
		if err != nil {
			if err := v.failed("open", child, err); err != nil {
				return err
			}
			continue
		}
		err = walkDir(fd, child, depth+1, v)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// readDirNames returns the names in the directory dirfd, sorted; dirfd
// stays open and its offset untouched.
func readDirNames(dirfd int) ([]string, error) {
	fd, err := openDirAt(dirfd, ".")
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), ".")
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// openSameDir opens the directory name of dirfd if it is still the one
// lstat'ed as st, never through a symlink.
func openSameDir(dirfd int, name string, st *unix.Stat_t) (int, error) {
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		return -1, err
	}
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if got.Dev != st.Dev || got.Ino != st.Ino {
		unix.Close(fd)
		return -1, refusef("changed while it was read; try again")
	}
	return fd, nil
}

// entryOf describes name of dirfd, rel in the workspace, lstat'ed as st.
func entryOf(dirfd int, name, rel string, st *unix.Stat_t) api.WorkspaceEntry {
	e := api.WorkspaceEntry{
		Path:  rel,
		Mode:  st.Mode & 0o777,
		MTime: time.Unix(st.Mtim.Unix()).UTC().Format(time.RFC3339),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type, e.Size = api.WorkspaceEntryFile, st.Size
	case unix.S_IFDIR:
		e.Type = api.WorkspaceEntryDir
	case unix.S_IFLNK:
		e.Type, e.Size = api.WorkspaceEntrySymlink, st.Size
		e.Target, _ = readlinkAt(dirfd, name) // gone or too long: no target
	default:
		e.Type = api.WorkspaceEntryOther
	}
	return e
}

// Stat returns the entry rel ("" or "." the workspace itself); a regular
// file's with its SHA-256, read through a descriptor opened without
// following links (a file with more than one hard link is not read: its
// entry has no SHA-256).
func (w *Workspace) Stat(rel string) (api.WorkspaceEntry, error) {
	rel, err := filesPath(rel, true, true)
	if err != nil {
		return api.WorkspaceEntry{}, err
	}
	root, done, err := w.root()
	if err != nil {
		return api.WorkspaceEntry{}, err
	}
	defer done()
	dirfd, name, err := w.parentOf(root, rel, "stat")
	if err != nil {
		return api.WorkspaceEntry{}, err
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := lstatAt(dirfd, name, &st); err != nil {
		return api.WorkspaceEntry{}, w.ioErr(rel, "stat", err)
	}
	e := entryOf(dirfd, name, rel, &st)
	if e.Type == api.WorkspaceEntryFile && st.Nlink == 1 {
		h, err := hashRegularAt(dirfd, name, &st)
		if err != nil {
			return api.WorkspaceEntry{}, w.ioErr(rel, "stat", err)
		}
		e.SHA256 = h
	}
	return e, nil
}

// ReadAt reads up to n bytes (<= 0 or over api.MaxWorkspaceChunk:
// api.MaxWorkspaceChunk) of the regular file rel from off; it returns the
// data, the file's size, and whether the data reaches its end. An offset
// past the end is an error (at the end: no data, eof). A symlink, a
// directory, a special file (never opened in a way that blocks) or a file
// with more than one hard link is refused.
func (w *Workspace) ReadAt(rel string, off, n int64) (data []byte, size int64, eof bool, err error) {
	rel, err = filesPath(rel, false, false)
	if err != nil {
		return nil, 0, false, err
	}
	if off < 0 {
		return nil, 0, false, errkind.Errorf(errkind.InvalidParams, "offset %d of %s is negative: read from 0 or later", off, runtime.QuoteName(rel))
	}
	if n <= 0 || n > api.MaxWorkspaceChunk {
		n = api.MaxWorkspaceChunk
	}
	root, done, err := w.root()
	if err != nil {
		return nil, 0, false, err
	}
	defer done()
	dirfd, name, err := w.parentOf(root, rel, "read")
	if err != nil {
		return nil, 0, false, err
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := lstatAt(dirfd, name, &st); err != nil {
		return nil, 0, false, w.ioErr(rel, "read", err)
	}
	if err := regularOnly(rel, &st, "read"); err != nil {
		return nil, 0, false, err
	}
	f, err := openRegularAt(dirfd, name, &st)
	if err != nil {
		return nil, 0, false, w.ioErr(rel, "read", err)
	}
	defer f.Close()
	if err := unix.Fstat(f.fd, &st); err != nil {
		return nil, 0, false, w.ioErr(rel, "read", err)
	}
	size = st.Size
	if off > size {
		return nil, size, false, errkind.Errorf(errkind.InvalidParams, "offset %d is past the end of %s, which is %d bytes: read from an offset below its size", off, runtime.QuoteName(rel), size)
	}
	if left := size - off; n > left {
		n = left
	}
	data = make([]byte, n)
	got := 0
	for got < len(data) {
		m, err := retry(func() (int, error) { return unix.Pread(f.fd, data[got:], off+int64(got)) })
		if err != nil {
			return nil, size, false, w.ioErr(rel, "read", err)
		}
		if m == 0 {
			break // shrunk while read
		}
		got += m
	}
	data = data[:got]
	return data, size, off+int64(got) >= size, nil
}

// regularOnly refuses what the files API does not read or write in
// place: anything but a singly linked regular file.
func regularOnly(rel string, st *unix.Stat_t, verb string) error {
	q, done := runtime.QuoteName(rel), "read"
	if verb == "write" {
		done = "written"
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return errkind.Errorf(errkind.InvalidParams, "%s is a directory, not a file: list it to see its files", q)
	case unix.S_IFLNK:
		return errkind.Errorf(errkind.InvalidParams, "%s is a symlink; the files API never follows one: %s the file it points to by its own path, or delete the link", q, verb)
	default:
		return errkind.Errorf(errkind.Denied, "%s is a %s; only regular files are %s (it can only be deleted)", q, kindName(st.Mode), done)
	}
	if st.Nlink > 1 {
		return errkind.Errorf(errkind.Denied, "%s has %d hard links and may be the same file as one outside the workspace; it is not %s (it can only be deleted)", q, st.Nlink, done)
	}
	return nil
}

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

// filesPath checks a path the files API was given and returns it clean:
// relative to the workspace, "/"-separated, "." the workspace itself
// (allowed with root; "" is the same), a trailing "/" dropped where dir
// says a directory may be meant.
func filesPath(rel string, root, dir bool) (string, error) {
	if rel == "" || rel == "." || (dir && rel == "./") {
		if !root {
			return "", errkind.Errorf(errkind.InvalidParams, "path %s is the workspace itself: give the path of a file in it, such as \"docs/report.pdf\"", runtime.QuoteName(rel))
		}
		return ".", nil
	}
	if dir && len(rel) > 1 && strings.HasSuffix(rel, "/") && !strings.HasSuffix(rel, "//") {
		rel = rel[:len(rel)-1]
	}
	if err := runtime.ValidateInputName(rel); err != nil {
		why := strings.TrimPrefix(errkind.Detail(err, runtime.ErrInvalidJob), "input ")
		return "", errkind.Errorf(errkind.InvalidParams, "path %s: paths are relative to the workspace, such as \"docs/report.pdf\"", why)
	}
	return rel, nil
}

// parentOf opens rel's directory; name is rel's last component ("." for
// the workspace itself).
func (w *Workspace) parentOf(root int, rel, verb string) (dirfd int, name string, err error) {
	dirfd, err = openDir(root, path.Dir(rel), false, nil)
	if err != nil {
		return -1, "", w.pathErr(rel, verb, err)
	}
	return dirfd, path.Base(rel), nil
}

// pathErr is an error of the kind a caller can act on for rel, whose
// directory could not be opened (by openDir).
func (w *Workspace) pathErr(rel, verb string, err error) error {
	var r *refusal
	if errors.As(err, &r) {
		return errkind.Errorf(errkind.InvalidParams, "cannot %s %s: %s (the files API follows no links)", verb, runtime.QuoteName(rel), r.why)
	}
	return w.ioErr(rel, verb, err)
}

// ioErr is an error of a kind for a system error on rel: missing, not
// allowed on the host, or the workspace is at fault.
func (w *Workspace) ioErr(rel, verb string, err error) error {
	q := runtime.QuoteName(rel)
	var r *refusal
	switch {
	case errors.As(err, &r):
		return errkind.Errorf(errkind.InvalidParams, "cannot %s %s: %s", verb, q, r.why)
	case errors.Is(err, unix.ENOENT):
		return errkind.Errorf(errkind.NotFound, "%s does not exist in the workspace: list the workspace to see what it holds", q)
	case denied(err):
		return errkind.Errorf(errkind.Denied, "cannot %s %s: permission denied on the host", verb, q)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG):
		return errkind.Errorf(errkind.LimitExceeded, "cannot %s %s: %v on the host: delete files or write less", verb, q, err)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR):
		return errkind.Errorf(errkind.InvalidParams, "cannot %s %s: it changed while it was used (%v); try again", verb, q, err)
	}
	return errkind.Errorf(errkind.Unavailable, "workspace %s: %s %s: %w", w.dir, verb, q, err)
}
