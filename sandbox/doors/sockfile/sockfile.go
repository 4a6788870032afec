// Package sockfile is the daemon's Unix socket files made safely: created
// with their mode and group before any client can connect, in a directory
// no other user can swap them in, guarded by a lock file that is never
// followed through a link, with a stale socket replaced and anything else
// left alone. Every listener of the daemon (the JSON-RPC socket, the
// console and the metrics sockets) opens its socket here, so the checks
// are written once and none of them needs the transport of another.
//
// It imports nothing of skillbox: its errors are of its own sentinels,
// whose words are those of the daemon's error kinds they stand for.
package sockfile

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Sentinels of Listen's errors, in the words of the daemon's error kinds
// (invalid params, unavailable, denied), so a message reads the same
// whichever package made it.
var (
	// ErrInvalid: the path, the group or what is at the path cannot be
	// used (empty or over-long path, not a socket, not a directory,
	// unknown group).
	ErrInvalid = errors.New("invalid params")
	// ErrInUse: another daemon serves on the path.
	ErrInUse = errors.New("unavailable")
	// ErrUnsafe: another user may control the socket's directory or its
	// lock file.
	ErrUnsafe = errors.New("denied")
)

// maxSocketPath is the longest path a Unix socket address holds on Linux
// (sun_path is 108 bytes including the terminating NUL).
const maxSocketPath = 107

// Listen creates the daemon's socket at path safely and returns its listener:
//
//   - The parent directory is created when missing (0750, or 0755 when mode
//     lets "other" users connect; given to group when one is named). An
//     existing directory that anyone may write to without the sticky bit is
//     refused: another user could swap the socket.
//   - A lock file (path + ".lock", flock) makes a second daemon on the same
//     path fail fast: "another skillbox is serving on P".
//   - An existing socket that accepts a connection is live (same error); one
//     that refuses connections is stale and is replaced. Anything that is not
//     a socket is an error, never deleted.
//   - The socket is bound inside a private (0700) temporary directory next to
//     path, given its mode and group there, and renamed into place, so no
//     client can connect while its permissions are still the umask's.
//
// group is a group name or numeric gid; "" keeps the daemon's group. The
// listener's Close removes the socket (if it is still the one it created)
// and releases the lock.
func Listen(path string, mode os.FileMode, group string) (net.Listener, error) {
	if path == "" {
		return nil, fmt.Errorf("socket path is empty: %w", ErrInvalid)
	}
	path = filepath.Clean(path)
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("socket path %s is %d bytes; Unix socket paths are limited to %d: %w",
			path, len(path), maxSocketPath, ErrInvalid)
	}
	mode = mode.Perm()
	gid := -1
	if group != "" {
		g, err := lookupGroup(group)
		if err != nil {
			return nil, err
		}
		gid = g
	}
	dir := filepath.Dir(path)
	if err := ensureSocketDir(dir, mode, gid); err != nil {
		return nil, err
	}

	lock, err := openLock(path + ".lock")
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another skillbox is serving on %s (it holds %s.lock): %w", path, path, ErrInUse)
		}
		return nil, fmt.Errorf("locking %s.lock: %w", path, err)
	}
	ln, err := bindSocket(path, dir, mode, gid)
	if err != nil {
		lock.Close()
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		ln.Close()
		lock.Close()
		return nil, fmt.Errorf("socket %s vanished after creation: %w", path, err)
	}
	return &unixListener{UnixListener: ln, path: path, dev: uint64(st.Dev), ino: st.Ino, lock: lock}, nil
}

// openLock opens (creating if need be) the socket's lock file without
// following a symbolic link, and only if it is a regular file of the
// daemon's own with one link. In a sticky world-writable directory another
// user may have put a link or a file of theirs at the path: following it
// would make the daemon (root) create or lock a file wherever they chose.
func openLock(path string) (*os.File, error) {
	refuse := func(why string) error {
		return fmt.Errorf("socket lock %s %s, so another user may control it; remove it, or use a socket directory only the daemon can write (e.g. /run/skillbox): %w", path, why, ErrUnsafe)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		// A link gives ELOOP, or EACCES when another user owns it in a
		// sticky directory: say which.
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil {
			if why := lockProblem(&st); why != "" {
				return nil, refuse(why)
			}
		}
		return nil, fmt.Errorf("opening socket lock %s (remove it if it is not the daemon's): %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("socket lock %s: %w", path, err)
	}
	if why := lockProblem(&st); why != "" {
		f.Close()
		return nil, refuse(why)
	}
	return f, nil
}

// lockProblem says what makes st unfit to be the daemon's lock file ("" if
// nothing).
func lockProblem(st *unix.Stat_t) string {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return "is a symbolic link, which skillbox does not follow"
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "is not a regular file"
	case st.Uid != uint32(os.Geteuid()):
		return fmt.Sprintf("belongs to uid %d, not to the daemon's uid %d", st.Uid, os.Geteuid())
	case st.Nlink != 1:
		return fmt.Sprintf("has %d hard links", st.Nlink)
	}
	return ""
}

// bindSocket checks what is at path and binds a new socket there.
func bindSocket(path, dir string, mode os.FileMode, gid int) (*net.UnixListener, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode()&os.ModeSocket == 0:
		return nil, fmt.Errorf("%s exists and is not a socket (%s); remove it or choose another socket path: %w",
			path, fi.Mode().Type(), ErrInvalid)
	case err == nil:
		probe, derr := net.DialTimeout("unix", path, time.Second)
		if derr == nil {
			probe.Close()
			return nil, fmt.Errorf("another skillbox is serving on %s: %w", path, ErrInUse)
		}
		if !errors.Is(derr, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("cannot tell whether %s is in use (%v); remove it if no daemon is running", path, derr)
		}
		// Stale: nothing listens. The rename below replaces it atomically.
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("checking %s: %w", path, err)
	}

	tmpDir, err := os.MkdirTemp(dir, ".sb")
	if err != nil {
		return nil, fmt.Errorf("creating socket in %s: %w", dir, err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	if len(tmp) > maxSocketPath {
		// No room for the private directory: bind in place and set the
		// permissions right away (the window is the only difference).
		os.Remove(path)
		tmp = path
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*net.UnixListener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("setting mode of %s: %w", path, err))
	}
	if gid >= 0 {
		if err := os.Lchown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("giving %s to gid %d (the daemon must be root or in that group): %w", path, gid, err))
		}
	}
	if tmp != path {
		if err := os.Rename(tmp, path); err != nil {
			return fail(fmt.Errorf("moving socket into place at %s: %w", path, err))
		}
	}
	return ln, nil
}

// ensureSocketDir creates or checks the socket's directory.
func ensureSocketDir(dir string, mode os.FileMode, gid int) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		perm := os.FileMode(0o750)
		if mode&0o007 != 0 {
			perm = 0o755
		}
		if err := os.MkdirAll(dir, perm); err != nil {
			return fmt.Errorf("creating socket directory: %w", err)
		}
		if err := os.Chmod(dir, perm); err != nil { // undo the umask
			return fmt.Errorf("socket directory %s: %w", dir, err)
		}
		if gid >= 0 {
			if err := os.Chown(dir, -1, gid); err != nil {
				return fmt.Errorf("giving socket directory %s to gid %d: %w", dir, gid, err)
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("socket directory %s is not a directory: %w", dir, ErrInvalid)
	}
	if fi.Mode().Perm()&0o002 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("socket directory %s is writable by every user, so one could replace the socket; use a directory only the daemon can write (e.g. /run/skillbox): %w", dir, ErrUnsafe)
	}
	return nil
}

// lookupGroup resolves a group name or numeric gid.
func lookupGroup(group string) (int, error) {
	if n, err := strconv.ParseUint(group, 10, 32); err == nil {
		return int(n), nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("unknown socket group %q (create it with groupadd, or give a gid): %w", group, ErrInvalid)
	}
	n, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("group %q has a non-numeric gid %q: %w", group, g.Gid, ErrInvalid)
	}
	return n, nil
}

// unixListener is Listen's listener: it reports the socket's final path and
// cleans up after itself on Close.
type unixListener struct {
	*net.UnixListener
	path     string
	dev, ino uint64
	lock     *os.File
	once     sync.Once
	err      error
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// Close stops listening, removes the socket file if it is still ours (not
// one a later daemon put in its place) and releases the lock.
func (l *unixListener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		var st unix.Stat_t
		if unix.Lstat(l.path, &st) == nil && uint64(st.Dev) == l.dev && st.Ino == l.ino {
			os.Remove(l.path)
		}
		l.lock.Close()
	})
	return l.err
}
