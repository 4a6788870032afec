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
