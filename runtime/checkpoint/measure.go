package checkpoint

import (
	"errors"
	"fmt"
	"path"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// EntryBytes is what a checkpoint is charged for each name it holds
// beyond the bytes of the files: the manifest's line for it (path, type,
// mode, digest) and its directory entry. A tree of a million empty files
// or of a thousand links to one file is not free.
const EntryBytes = 256

// TreeUsage is what a copy of a tree would take, as Measure found it.
type TreeUsage struct {
	// Bytes is the apparent size of its regular files and symlinks, each
	// inode once: a sparse file counts at its length (its holes are kept
	// in the copy, but the checkpoint's manifest hashes every byte of it),
	// a file with hard links once.
	Bytes int64
	// Allocated is the disk its inodes use now (st_blocks), each once.
	Allocated int64
	// Entries is how many names it holds (files, links, directories,
	// symlinks, fifos); Links how many of them are further names of a
	// file already counted.
	Entries, Links int64
	// Largest is the path (relative, "/"-separated) and apparent size of
	// its largest file: what to delete first.
	Largest     string
	LargestSize int64
}

// Need is what a copy of the tree is charged: its bytes and EntryBytes
// for every name.
func (u TreeUsage) Need() int64 { return u.Bytes + u.Entries*EntryBytes }

// String says what the tree holds, for an error its owner can act on.
func (u TreeUsage) String() string {
	s := fmt.Sprintf("%s in %d entries (%d of them hard links), %s allocated", fmtBytes(u.Bytes), u.Entries, u.Links, fmtBytes(u.Allocated))
	if u.Largest != "" {
		s += fmt.Sprintf("; the largest file is %s (%s, sparse files count at their length)", u.Largest, fmtBytes(u.LargestSize))
	}
	return s
}

// Measure walks the tree src without following a symlink (as CopyTree
// copies it) and returns what a copy would take. It stops, with an
// ErrBudgetExceeded error, as soon as the tree's Need passes limit (0: no
// limit), so a huge tree costs a bounded walk. Entries that vanish while
// it walks are left out.
func Measure(src string, limit int64) (TreeUsage, error) {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return TreeUsage{}, fmt.Errorf("measure %s: open it (it must be a directory, not a link): %w", src, err)
	}
	defer unix.Close(fd)
	w := &measurer{src: src, limit: limit, seen: map[devIno]bool{}}
	err = w.dir(fd, "")
	return w.u, err
}

type devIno struct{ dev, ino uint64 }

type measurer struct {
	src   string
	limit int64
	u     TreeUsage
	seen  map[devIno]bool
}

func (w *measurer) dir(fd int, rel string) error {
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("measure %s: list %s: %w", w.src, orDot(rel), err)
	}
	for _, name := range names {
		r := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("measure %s: %s: %w", w.src, r, err)
		}
		w.u.Entries++
		k := devIno{uint64(st.Dev), st.Ino}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG, unix.S_IFLNK:
			if st.Nlink > 1 && st.Mode&unix.S_IFMT == unix.S_IFREG {
				if w.seen[k] {
					w.u.Links++
					break
				}
				w.seen[k] = true
			}
			w.u.Bytes += st.Size
			w.u.Allocated += st.Blocks * 512
			if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size > w.u.LargestSize {
				w.u.Largest, w.u.LargestSize = r, st.Size
			}
		}
		if w.limit > 0 && w.u.Need() > w.limit {
			return errkind.Errorf(ErrBudgetExceeded, "%s holds more than the %s a checkpoint of it may take: %s so far", w.src, fmtBytes(w.limit), w.u)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			child, err := openSame(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, &st)
			if err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("measure %s: %s: %w", w.src, r, err)
			}
			err = w.dir(child, r)
			unix.Close(child)
			if err != nil {
				return err
			}
		}
	}
	return nil
}
