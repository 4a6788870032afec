package workspace

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Default caps (Caps fields left zero).
const (
	DefaultFiles     = runtime.MaxInputEntries // entries copied in: all a job takes
	DefaultBytes     = int64(1 << 30)          // bytes copied in, all files together
	DefaultFileBytes = int64(256 << 20)        // bytes of one file, in or back
)

func (c Caps) withDefaults() Caps {
	if c.Files <= 0 {
		c.Files = DefaultFiles
	}
	if c.Bytes <= 0 {
		c.Bytes = DefaultBytes
	}
	if c.FileBytes <= 0 {
		c.FileBytes = DefaultFileBytes
	}
	return c
}

// Workspace is an open host directory. Every path below it is resolved
// from the directory's file descriptor, taken once by Open, one component
// at a time and never through a symlink: renaming the directory or
// swapping one of its subdirectories for a link cannot send a read or a
// write anywhere else. A Workspace is safe for concurrent use.
type Workspace struct {
	dir string

	mu sync.RWMutex
	fd int // -1 once closed

	// quotaMu makes the check of a quota and the write it lets through
	// one step: two writers never both take the last of a quota.
	quotaMu sync.Mutex
	// count is what the workspace holds, kept for the quota (quota.go).
	count usageCount

	// raced, when set (tests), runs in Apply after the host copy of rel
	// was checked and before it is replaced or deleted: a host writer
	// racing the write-back.
	// In Delete it runs before each entry under the directory deleted
	// is opened: a host swapping a subdirectory for a link.
	raced func(rel string)
	// noRenameat2, when set (tests), makes Apply take the way it takes on
	// a file system without renameat2's flags.
	noRenameat2 bool
}

// Open opens the workspace at dir, a directory. The symlinks on dir's path,
// dir itself included, are resolved once, here (a user's ~/project may
// well be a link to where the files are); Dir is the resolved path, and it
// is that path a policy must grant. Nothing later goes through the path
// again: everything is relative to the directory opened here.
func Open(dir string) (*Workspace, error) {
	if dir == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "workspace directory is empty: give the directory a run works in")
	}
	if strings.IndexByte(dir, 0) >= 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "workspace directory %s contains a NUL byte", runtime.QuoteName(dir))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidParams, "workspace directory %s: %w", dir, err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errkind.Errorf(errkind.NotFound, "workspace directory %s does not exist: create it or give another one", dir)
		}
		return nil, errkind.Errorf(errkind.InvalidParams, "workspace directory %s: %w", dir, err)
	}
	if err := checkNotSystem(resolved); err != nil {
		return nil, err
	}
	fd, err := retry(func() (int, error) {
		return unix.Open(resolved, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	switch {
	case errors.Is(err, unix.ENOTDIR):
		return nil, errkind.Errorf(errkind.InvalidParams, "workspace %s is not a directory", resolved)
	case errors.Is(err, unix.ELOOP):
		return nil, errkind.Errorf(errkind.InvalidParams, "workspace %s became a symlink while it was opened; try again", resolved)
	case errors.Is(err, unix.ENOENT):
		return nil, errkind.Errorf(errkind.NotFound, "workspace directory %s does not exist: create it or give another one", resolved)
	case err != nil:
		return nil, errkind.Errorf(errkind.InvalidParams, "workspace %s: %w", resolved, &os.PathError{Op: "open", Path: resolved, Err: err})
	}
	return &Workspace{dir: resolved, fd: fd}, nil
}

// Dir is the workspace's resolved path, for messages and the audit log.
func (w *Workspace) Dir() string { return w.dir }

// Close releases the directory. Snapshot and Apply fail after it.
func (w *Workspace) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd = -1
	if err != nil {
		return fmt.Errorf("close workspace %s: %w", w.dir, err)
	}
	return nil
}

// root returns the open directory, the read lock held; call done after.
func (w *Workspace) root() (fd int, done func(), err error) {
	w.mu.RLock()
	if w.fd < 0 {
		w.mu.RUnlock()
		return -1, nil, errkind.Errorf(errkind.Unavailable, "workspace %s is closed", w.dir)
	}
	var st unix.Stat_t
	if err := unix.Fstat(w.fd, &st); err != nil {
		w.mu.RUnlock()
		return -1, nil, errkind.Errorf(errkind.Unavailable, "workspace %s: %w", w.dir, err)
	}
	if st.Nlink == 0 {
		w.mu.RUnlock()
		return -1, nil, errkind.Errorf(errkind.Unavailable, "workspace %s was removed", w.dir)
	}
	return w.fd, w.mu.RUnlock, nil
}

// refusal is a path the file system of the host will not let through: a
// symlink or a non-directory on the way, a file of the wrong kind. It
// becomes a api.WorkspaceFinding, never an error of the whole operation.
type refusal struct{ why string }

func (r *refusal) Error() string { return r.why }

func refusef(format string, args ...any) error { return &refusal{why: fmt.Sprintf(format, args...)} }

// retry repeats a system call interrupted by a signal.
func retry[T any](f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err != unix.EINTR {
			return v, err
		}
	}
}

func lstatAt(dirfd int, name string, st *unix.Stat_t) error {
	_, err := retry(func() (int, error) { return 0, unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW) })
	return err
}

// openDirAt opens the directory name inside dirfd, never through a symlink.
func openDirAt(dirfd int, name string) (int, error) {
	return retry(func() (int, error) {
		return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
}

// openDir opens the directory rel ("." the root) below root, one component
// at a time with O_NOFOLLOW. With create, missing directories are made
// (0755, owned by owner when set). A component that is a symlink or not a
// directory is a refusal; a missing one without create wraps
// unix.ENOENT.
func openDir(root int, rel string, create bool, owner *Owner) (int, error) {
	fd, err := retry(func() (int, error) { return unix.FcntlInt(uintptr(root), unix.F_DUPFD_CLOEXEC, 0) })
	if err != nil {
		return -1, err
	}
	if rel == "." || rel == "" {
		return fd, nil
	}
	walked := ""
	for comp := range strings.SplitSeq(rel, "/") {
		walked = path.Join(walked, comp)
		next, err := openDirAt(fd, comp)
		if errors.Is(err, unix.ENOENT) && create {
			err = mkdirAt(fd, comp, owner)
			if err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openDirAt(fd, comp)
			}
		}
		if err != nil {
			err = componentErr(fd, comp, walked, err)
			unix.Close(fd)
			return -1, err
		}
		unix.Close(fd)
		fd = next
	}
	return fd, nil
}

func mkdirAt(dirfd int, name string, owner *Owner) error {
	if _, err := retry(func() (int, error) { return 0, unix.Mkdirat(dirfd, name, 0o755) }); err != nil {
		return err
	}
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, 0o755); err != nil { // whatever the umask
		return err
	}
	if owner != nil {
		return unix.Fchown(fd, owner.UID, owner.GID)
	}
	return nil
}

// componentErr says why the directory walked (name in dirfd) could not be
// opened, looking at what is there without following it.
func componentErr(dirfd int, name, walked string, err error) error {
	var st unix.Stat_t
	if lerr := lstatAt(dirfd, name, &st); lerr == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return refusef("%s is a symlink on the host; not followed", runtime.QuoteName(walked))
		case unix.S_IFDIR:
		default:
			return refusef("%s is a %s on the host, not a directory", runtime.QuoteName(walked), kindName(st.Mode))
		}
	}
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s: %w", walked, unix.ENOENT)
	}
	return fmt.Errorf("open %s: %w", walked, err)
}

func kindName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "named pipe (FIFO)"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "special file"
}

// openRegularAt opens name in dirfd for reading if it is the regular,
// singly linked file want (an lstat of it) still: never through a
// symlink, never blocking on a FIFO or a device.
func openRegularAt(dirfd int, name string, want *unix.Stat_t) (*fdReader, error) {
	fd, err := retry(func() (int, error) {
		return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != want.Dev || st.Ino != want.Ino || st.Nlink != 1 {
		unix.Close(fd)
		return nil, refusef("changed while it was read; try again")
	}
	// Regular files ignore O_NONBLOCK; read(2) directly, without the
	// poller and the fcntl calls an os.File would make.
	return &fdReader{fd: fd}, nil
}

// fdReader reads a regular file by its descriptor.
type fdReader struct{ fd int }

func (r *fdReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := retry(func() (int, error) { return unix.Read(r.fd, p) })
	switch {
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *fdReader) Close() error { return unix.Close(r.fd) }

// readAll reads f, sized size by its stat, refusing more than max bytes
// (a file that grows while it is read is caught too).
func readAll(f io.Reader, size, max int64) ([]byte, error) {
	if size > max {
		return nil, errTooBig
	}
	buf := make([]byte, 0, size+1)
	for {
		if int64(len(buf)) > max {
			return nil, errTooBig
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if int64(len(buf)) > max {
				return nil, errTooBig
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

var errTooBig = errors.New("over the per-file cap")

// hashRegularAt returns the SHA-256 of the regular file name in dirfd,
// lstat'ed as st, or a refusal.
func hashRegularAt(dirfd int, name string, st *unix.Stat_t) (string, error) {
	f, err := openRegularAt(dirfd, name, st)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := retry(func() (int, error) { return unix.Readlinkat(dirfd, name, buf) })
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", refusef("has a link target longer than %d bytes", len(buf)-1)
	}
	return string(buf[:n]), nil
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// tempName is a fresh name for a file Apply writes before it is put in
// place: hidden, and never a name a run could have chosen in advance.
func tempName() string {
	var b [8]byte
	rand.Read(b[:])
	return ".skillbox-" + hex.EncodeToString(b[:]) + ".tmp"
}
