package skills

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once the kernel answers ENOSYS (Linux before 5.6, or a
// seccomp filter that hides openat2); from then on os.Root does the work.
// Tests set it to exercise the fallback.
var noOpenat2 atomic.Bool

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// openConfined resolves rel under root in the kernel. It first opens an
// O_PATH handle (which never blocks and has no side effects, whatever the
// file is) and checks it is a regular, singly linked file; only then opens it
// for reading and makes sure the second open reached the same inode.
func openConfined(root, rel string) (*os.File, error) {
	if noOpenat2.Load() {
		return openWithRoot(root, rel)
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, rootErr(root, &os.PathError{Op: "open", Path: root, Err: err})
	}
	defer unix.Close(rootFD)

	pathFD, err := openat2(rootFD, rel, unix.O_PATH|unix.O_CLOEXEC)
	if errors.Is(err, unix.ENOSYS) {
		noOpenat2.Store(true)
		return openWithRoot(root, rel)
	}
	if err != nil {
		return nil, errnoErr(rel, err)
	}
	var first unix.Stat_t
	err = unix.Fstat(pathFD, &first)
	unix.Close(pathFD)
	if err != nil {
		return nil, fmt.Errorf("%s: fstat: %w", rel, err)
	}
	if err := checkStat(&first, rel); err != nil {
		return nil, err
	}

	fd, err := openat2(rootFD, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, errnoErr(rel, err)
	}
	var second unix.Stat_t
	if err := unix.Fstat(fd, &second); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: fstat: %w", rel, err)
	}
	if second.Dev != first.Dev || second.Ino != first.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w: the file was replaced while it was opened; try again", rel, ErrNotRegular)
	}
	if err := checkStat(&second, rel); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Regular files ignore O_NONBLOCK, but os.File would try the poller.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, rel)), nil
}

// openat2 retries EAGAIN, which the kernel returns when a concurrent rename
// might have let a '..' walk escape; giving up after a few tries is safe.
func openat2(dirFD int, rel string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags), Resolve: resolveFlags}
	var err error
	for range 16 {
		var fd int
		fd, err = unix.Openat2(dirFD, rel, &how)
		if err == nil {
			return fd, nil
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			return -1, err
		}
	}
	return -1, err
}

func checkStat(st *unix.Stat_t, rel string) error {
	mode := st.Mode & unix.S_IFMT
	if mode != unix.S_IFREG {
		kind := map[uint32]string{
			unix.S_IFDIR: "directory", unix.S_IFIFO: "named pipe (FIFO)", unix.S_IFSOCK: "socket",
			unix.S_IFCHR: "character device", unix.S_IFBLK: "block device", unix.S_IFLNK: "symlink",
		}[mode]
		if kind == "" {
			kind = "special file"
		}
		return fmt.Errorf("%s: %w: it is a %s; only regular files can be read", rel, ErrNotRegular, kind)
	}
	if st.Nlink > 1 {
		return fmt.Errorf("%s: %w: the file has %d hard links and may be shared with files outside the skill; copy it instead of hardlinking", rel, ErrEscape, st.Nlink)
	}
	return nil
}

func errnoErr(rel string, err error) error {
	switch err {
	case unix.EXDEV:
		return escapes(rel)
	case unix.ELOOP:
		return fmt.Errorf("%s: %w: the path goes through a symlink loop or a /proc magic link; only files inside the skill can be read", rel, ErrEscape)
	case unix.ENOENT, unix.ENOTDIR:
		return notFound(rel)
	case unix.ENAMETOOLONG:
		return fmt.Errorf("%s: %w: the path is too long", rel, ErrNotFound)
	}
	return fmt.Errorf("%s: %w", rel, &os.PathError{Op: "open", Path: rel, Err: err})
}
