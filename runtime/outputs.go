package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"
)

// Outputs are read on the host after the container has stopped, so nothing
// in the sandbox can swap a file for a link while we read. Even so every
// open is relative to an already-open directory with O_NOFOLLOW, and only
// regular files and directories are entered: a symlink the script left
// behind (to /etc/shadow, say) is named in OutputsSkipped, never followed.

// maxOutputDepth bounds how deep outputs/ is walked.
const maxOutputDepth = 16

// CollectOutputs reads the regular files under workdir/outputs (host side),
// up to lim.OutputFiles files and lim.OutputBytes bytes in total. Files are
// visited in lexical order, so which ones fit under the caps is stable.
// Anything skipped is reported as "path: why". A missing outputs/ is not an
// error (the script may have removed it).
func CollectOutputs(workdir string, lim Limits) ([]OutputFile, []string, error) {
	lim = lim.WithDefaults()
	wd, err := unix.Open(workdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open workdir: %w", err)
	}
	defer unix.Close(wd)
	c := &collector{lim: lim}
	name := path.Base(OutputsDir)
	var st unix.Stat_t
	if err := unix.Fstatat(wd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("stat outputs: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, []string{name + ": " + kindOf(st.Mode) + ", not a directory; nothing collected"}, nil
	}
	if err := c.walkDir(wd, name, "", 0); err != nil {
		return nil, nil, err
	}
	if c.unlisted > 0 {
		c.skipped = append(c.skipped, fmt.Sprintf("... and %d more entries not collected (only the first %d are named)", c.unlisted, maxSkippedNamed))
	}
	return c.files, c.skipped, nil
}

// A script decides how many entries outputs/ holds and how they are named;
// what is reported about them (in results and audit records) stays small.
const (
	maxSkippedNamed = 100 // skipped entries named one by one
	maxNameReported = 256 // bytes of a path kept in a report
	maxOutputWalk   = 1e5 // entries visited at most
)

type collector struct {
	lim      Limits
	files    []OutputFile
	skipped  []string
	unlisted int // skipped but not named
	visited  int
	total    int64
}

func (c *collector) skip(rel, why string) {
	if len(c.skipped) >= maxSkippedNamed {
		c.unlisted++
		return
	}
	c.skipped = append(c.skipped, reportName(rel)+": "+why)
}

// reportName makes a script-chosen path safe to show and store: quoted when
// it holds anything but printable characters, and cut to a bounded length.
func reportName(rel string) string {
	if len(rel) > maxNameReported {
		rel = strings.ToValidUTF8(rel[:maxNameReported], "") + "..."
	}
	for _, r := range rel {
		if !unicode.IsPrint(r) {
			return strconv.Quote(rel)
		}
	}
	return rel
}

// walkDir opens name inside parent (no symlinks) and collects its entries;
// rel is its path relative to outputs/ ("" for outputs/ itself).
func (c *collector) walkDir(parent int, name, rel string, depth int) error {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		c.skip(relOr(rel, name), "cannot open directory: "+err.Error())
		return nil
	}
	dir := os.NewFile(uintptr(fd), name)
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		c.skip(relOr(rel, name), "cannot list directory: "+err.Error())
		return nil
	}
	sort.Strings(names)
	for _, n := range names {
		r := n
		if rel != "" {
			r = rel + "/" + n
		}
		if c.visited++; c.visited > maxOutputWalk {
			c.unlisted++
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			c.skip(r, "cannot stat: "+err.Error())
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if depth+1 >= maxOutputDepth {
				c.skip(r, fmt.Sprintf("directory nested deeper than %d levels", maxOutputDepth))
				continue
			}
			if err := c.walkDir(fd, n, r, depth+1); err != nil {
				return err
			}
		case unix.S_IFREG:
			c.readFile(fd, n, r, st.Size)
		default:
			c.skip(r, kindOf(st.Mode)+", not collected")
		}
	}
	return nil
}

func (c *collector) readFile(dirfd int, name, rel string, size int64) {
	if len(c.files) >= c.lim.OutputFiles {
		c.skip(rel, fmt.Sprintf("over the cap of %d output files", c.lim.OutputFiles))
		return
	}
	if c.total+size > c.lim.OutputBytes {
		c.skip(rel, fmt.Sprintf("%d bytes would exceed the %d-byte output cap", size, c.lim.OutputBytes))
		return
	}
	// O_NONBLOCK so that a FIFO swapped in (it cannot be: the container is
	// stopped) would not hang us; we check the type again on the open fd.
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		c.skip(rel, "cannot open: "+err.Error())
		return
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		c.skip(rel, "changed while collecting, not collected")
		return
	}
	remaining := c.lim.OutputBytes - c.total
	data, err := io.ReadAll(io.LimitReader(f, remaining+1))
	if err != nil {
		c.skip(rel, "cannot read: "+err.Error())
		return
	}
	if int64(len(data)) > remaining {
		c.skip(rel, fmt.Sprintf("grew past the %d-byte output cap while reading", c.lim.OutputBytes))
		return
	}
	sum := sha256.Sum256(data)
	c.total += int64(len(data))
	c.files = append(c.files, OutputFile{
		Path:   rel,
		Size:   int64(len(data)),
		SHA256: hex.EncodeToString(sum[:]),
		Data:   data,
	})
}

func relOr(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel
}

func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFDIR:
		return "directory"
	default:
		return "special file"
	}
}
