package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// CopyTree copies the directory tree src to dst without following a
// symlink anywhere below src: directories, regular files, symlinks (their
// targets verbatim, never resolved) and fifos, with their modes and
// mtimes, and their owners when the process is root. dst must not exist
// or be an empty directory (it then takes src's mode and owner). Device
// files and sockets are not copied: their paths (relative to src, "/"-
// separated) are returned, for the caller to report. A sparse file's
// holes stay holes (only its data extents are written, SEEK_DATA and
// SEEK_HOLE), and the names of one file stay hard links of one file (by
// device and inode), so the copy takes the disk the tree took.
//
// Every step opens relative to an open directory (openat with O_NOFOLLOW,
// and a file is checked to be the one listed), so a sandbox that changes
// its /work while it is copied cannot make the copy leave src or write
// outside dst. Used for a session sandbox's /work (checkpoint and restore,
// a copy per fork).
func CopyTree(src, dst string) (skipped []string, err error) {
	return CopyTreeWith(src, dst, CopyOptions{})
}

// CopyOptions bound a copy.
type CopyOptions struct {
	// Charge, when set, is called before every write with the bytes it
	// is about to add to the copy: a file's data and the holes between
	// (a file is charged up to the end of what is written, so its
	// apparent size in all), and EntryBytes for every name. An error
	// stops the copy there and is returned: a tree that grows while it is
	// copied stops at the budget, whatever a walk before said.
	Charge func(n int64) error
}

// CopyTreeWith is CopyTree with bounds.
func CopyTreeWith(src, dst string, o CopyOptions) (skipped []string, err error) {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("copy %s: open it (it must be a directory, not a link): %w", src, err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return nil, fmt.Errorf("copy %s: %w", src, err)
	}
	if err := unix.Mkdir(dst, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("copy %s to %s: open the target (it must be a directory, not a link): %w", src, dst, err)
	}
	defer unix.Close(dfd)
	if names, err := readNames(dfd); err != nil {
		return nil, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	} else if len(names) > 0 {
		return nil, fmt.Errorf("copy %s to %s: the target is not empty (it holds %q); copy into a new or empty directory", src, dst, names[0])
	}
	c := &copier{src: src, dst: dst, root: os.Geteuid() == 0, droot: dfd, charge: o.Charge, links: map[devIno]copied{}}
	if c.charge == nil {
		c.charge = func(int64) error { return nil }
	}
	if err := c.dir(sfd, dfd, ""); err != nil {
		return c.skipped, err
	}
	if err := c.finishDir(dfd, &st); err != nil {
		return c.skipped, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := unix.UtimesNano(dst, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
		return c.skipped, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return c.skipped, nil
}

type copier struct {
	src, dst string
	root     bool // preserve owners
	skipped  []string
	droot    int // dst, open
	charge   func(int64) error
	// links are the files with more than one name copied so far, by
	// their source's device and inode: a further name becomes a link.
	links map[devIno]copied
	buf   []byte
}

// copied is a file of the copy that further names link to: its path
// below dst and its inode there.
type copied struct {
	rel string
	ino uint64
}

// readNames lists a directory's entries by an fd it leaves open.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// dir copies the entries of the open source directory sfd into the open
// target directory dfd; rel is their path below src.
func (c *copier) dir(sfd, dfd int, rel string) error {
	names, err := readNames(sfd)
	if err != nil {
		return fmt.Errorf("copy %s: list %s: %w", c.src, orDot(rel), err)
	}
	for _, name := range names {
		if err := c.entry(sfd, dfd, name, path.Join(rel, name)); err != nil {
			return err
		}
	}
	return nil
}

func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

func (c *copier) entry(sfd, dfd int, name, rel string) error {
	fail := func(err error) error { return fmt.Errorf("copy %s of %s to %s: %w", rel, c.src, c.dst, err) }
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed while the tree was copied
		}
		return fail(err)
	}
	if err := c.charge(EntryBytes); err != nil {
		return fail(err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		child, err := openSame(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY, &st)
		if err != nil {
			return fail(err)
		}
		defer unix.Close(child)
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return fail(err)
		}
		dchild, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		defer unix.Close(dchild)
		if err := c.dir(child, dchild, rel); err != nil {
			return err
		}
		// The mode last: a read-only directory must first get its entries.
		if err := c.finishDir(dchild, &st); err != nil {
			return fail(err)
		}
		return fail2(fail, setTimes(dfd, name, &st))
	case unix.S_IFREG:
		in, err := openSame(sfd, name, unix.O_RDONLY|unix.O_NONBLOCK, &st)
		if err != nil {
			return fail(err)
		}
		defer unix.Close(in)
		key := devIno{uint64(st.Dev), st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[key]; ok {
				return fail2(fail, c.link(first, dfd, name))
			}
		}
		out, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fail(err)
		}
		defer unix.Close(out)
		if err := c.data(in, out); err != nil {
			return fail(err)
		}
		if err := c.owner(func(uid, gid int) error { return unix.Fchown(out, uid, gid) }, &st); err != nil {
			return fail(err)
		}
		if err := unix.Fchmod(out, st.Mode&0o7777); err != nil {
			return fail(err)
		}
		if st.Nlink > 1 {
			var ost unix.Stat_t
			if err := unix.Fstat(out, &ost); err != nil {
				return fail(err)
			}
			c.links[key] = copied{rel: rel, ino: ost.Ino}
		}
		return fail2(fail, setTimes(dfd, name, &st))
	case unix.S_IFLNK:
		target, err := readlinkat(sfd, name, st.Size)
		if err != nil {
			return fail(err)
		}
		if err := unix.Symlinkat(target, dfd, name); err != nil {
			return fail(err)
		}
		if err := c.owner(func(uid, gid int) error { return unix.Fchownat(dfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW) }, &st); err != nil {
			return fail(err)
		}
		return fail2(fail, setTimes(dfd, name, &st))
	case unix.S_IFIFO:
		if err := unix.Mkfifoat(dfd, name, 0o600); err != nil {
			return fail(err)
		}
		// The fifo is new in a directory only this copy writes, so the
		// by-name calls below reach it.
		if err := c.owner(func(uid, gid int) error { return unix.Fchownat(dfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW) }, &st); err != nil {
			return fail(err)
		}
		if err := unix.Fchmodat(dfd, name, st.Mode&0o7777, 0); err != nil {
			return fail(err)
		}
		return fail2(fail, setTimes(dfd, name, &st))
	default: // character and block devices, sockets
		c.skipped = append(c.skipped, rel)
		return nil
	}
}

// link makes name in dfd a further name of the file first copied as
// first, and checks it is (the copy's own tree is not the sandbox's, but
// a link is checked like every file).
func (c *copier) link(first copied, dfd int, name string) error {
	if err := unix.Linkat(c.droot, first.rel, dfd, name, 0); err != nil {
		return fmt.Errorf("link it to %s: %w", first.rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Ino != first.ino {
		return fmt.Errorf("its link to %s is not that file", first.rel)
	}
	return nil
}

// data copies the open file in to out: its data extents, each where it
// was, and its length, so its holes stay holes. Every write is charged
// first, with the holes before it; the file's length is taken at the end
// (a file that shrank while it was copied loses what it lost).
func (c *copier) data(in, out int) error {
	if c.buf == nil {
		c.buf = make([]byte, 1<<20)
	}
	var off, charged int64
	for {
		start, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after off
		}
		end := int64(-1) // to the end of the file
		if err != nil {
			// A filesystem without SEEK_DATA: all of it is data.
			start = off
		} else if end, err = unix.Seek(in, start, unix.SEEK_HOLE); err != nil {
			return fmt.Errorf("find its holes: %w", err)
		}
		pos := start
		for end < 0 || pos < end {
			n := int64(len(c.buf))
			if end >= 0 && end-pos < n {
				n = end - pos
			}
			got, err := unix.Pread(in, c.buf[:n], pos)
			if err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				return fmt.Errorf("read it: %w", err)
			}
			if got == 0 {
				break // it shrank, or its end without SEEK_DATA
			}
			if more := pos + int64(got) - charged; more > 0 {
				if err := c.charge(more); err != nil {
					return err
				}
				charged += more
			}
			for w := 0; w < got; {
				n, err := unix.Pwrite(out, c.buf[w:got], pos+int64(w))
				if err != nil {
					if errors.Is(err, unix.EINTR) {
						continue
					}
					return fmt.Errorf("write its copy: %w", err)
				}
				w += n
			}
			pos += int64(got)
		}
		if end < 0 || pos < end {
			break
		}
		off = end
	}
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return err
	}
	if more := st.Size - charged; more > 0 {
		if err := c.charge(more); err != nil {
			return err
		}
	}
	return unix.Ftruncate(out, st.Size)
}

func fail2(fail func(error) error, err error) error {
	if err != nil {
		return fail(err)
	}
	return nil
}

// openSame opens name below dirfd without following a link and checks it
// is the entry that was stat'ed (not one swapped in since).
func openSame(dirfd int, name string, flags int, want *unix.Stat_t) (int, error) {
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Dev != want.Dev || st.Ino != want.Ino || st.Mode&unix.S_IFMT != want.Mode&unix.S_IFMT {
		unix.Close(fd)
		return -1, fmt.Errorf("it was replaced while it was copied")
	}
	*want = st // the mode and times as opened
	return fd, nil
}

// readlinkat reads a link's target whatever its length.
func readlinkat(dirfd int, name string, size int64) (string, error) {
	n := int(size) + 1
	if n < 256 {
		n = 256
	}
	for {
		buf := make([]byte, n)
		got, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if got < n {
			return string(buf[:got]), nil
		}
		n *= 2
	}
}

// finishDir gives a copied directory src's owner and mode (its times are
// set by name, after).
func (c *copier) finishDir(fd int, st *unix.Stat_t) error {
	if err := c.owner(func(uid, gid int) error { return unix.Fchown(fd, uid, gid) }, st); err != nil {
		return err
	}
	return unix.Fchmod(fd, st.Mode&0o7777)
}

// owner sets src's owner with chown when the copy runs as root (an
// ordinary user's copy belongs to the user).
func (c *copier) owner(chown func(uid, gid int) error, st *unix.Stat_t) error {
	if !c.root {
		return nil
	}
	return chown(int(st.Uid), int(st.Gid))
}

// setTimes gives an entry src's access and modification times, without
// following a link.
func setTimes(dirfd int, name string, st *unix.Stat_t) error {
	return unix.UtimesNanoAt(dirfd, name, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}
