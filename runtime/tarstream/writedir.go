package tarstream

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/oci"
)

// maxWriteDepth bounds how deep WriteDir walks, as the collector does.
const maxWriteDepth = 64

// tarTrailer is the two zero blocks that end a tar stream.
const tarTrailer = 1024

// Written is what WriteDir wrote.
type Written struct {
	Bytes   int64 // of the stream, its trailer included
	Entries int
	// Truncated says the stream stopped before Omitted, the first entry
	// that would have taken it over its bound; the stream is a whole tar
	// stream of what came before.
	Truncated bool
	Omitted   string
	// Notes name what was not written as it is ("path: why"), at most
	// MaxNotes of them and a count of the rest.
	Notes []string
}

// WriteDir writes a tar stream of the open directory dir to w, as
// `tar -c -C dir .` would (names "./a/b", modes, owners and times as
// they are), in lexical order, of at most maxBytes bytes. Every entry is
// opened relative to its directory with O_NOFOLLOW: a symlink is written
// as a symlink and never followed, and a directory swapped for a link
// while the walk runs is not entered. Before an entry that would not fit
// (with the stream's trailer) the stream ends, whole, and Written says
// so. dir is read from where its offset is. Hard links are written as the files they are; sockets are named
// in Notes and left out; a file that shrank as it was read is padded
// with zeros and named. An error is w failing, or dir not readable.
func WriteDir(w io.Writer, dir *os.File, maxBytes int64) (Written, error) {
	c := &countWriter{w: w}
	d := &dirWriter{tw: tar.NewWriter(c), c: c, max: maxBytes}
	err := d.walk(dir, ".", 0)
	if errors.Is(err, errStop) {
		err = nil
	}
	if err != nil {
		return d.out, err
	}
	if err := d.tw.Close(); err != nil {
		return d.out, err
	}
	d.out.Bytes = c.n
	d.out.Notes = LimitNotes(d.out.Notes)
	return d.out, nil
}

// errStop ends a walk at the bound.
var errStop = errors.New("stop")

type dirWriter struct {
	tw  *tar.Writer
	c   *countWriter
	max int64
	out Written
}

// room says whether an entry of that name, link target and data size
// fits, counted generously: a header, a PAX header for long names or big
// numbers, padding and the trailer.
func (d *dirWriter) room(name, link string, size int64) bool {
	cost := int64(3*512) + int64(len(name)+len(link)+511)/512*512 + (size+511)/512*512 + tarTrailer
	return d.c.n+cost <= d.max
}

func (d *dirWriter) note(name, why string) {
	d.out.Notes = append(d.out.Notes, oci.ReportName(name)+": "+why)
}

// walk writes the entries of directory f, whose name is rel.
func (d *dirWriter) walk(f *os.File, rel string, depth int) error {
	fd := int(f.Fd())
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", oci.ReportName(rel), err)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := d.entry(fd, rel+"/"+n, n, depth); err != nil {
			return err
		}
	}
	return nil
}

func (d *dirWriter) entry(dirfd int, name, base string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		d.note(name, "cannot stat: "+err.Error())
		return nil
	}
	h := &tar.Header{
		Name: name, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()).Truncate(time.Second), Format: tar.FormatPAX,
	}
	var open func() (*os.File, error)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case unix.S_IFREG:
		h.Typeflag, h.Size = tar.TypeReg, st.Size
		open = func() (*os.File, error) {
			fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			if err != nil {
				return nil, err
			}
			var now unix.Stat_t
			if err := unix.Fstat(fd, &now); err != nil || now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino || now.Dev != st.Dev {
				unix.Close(fd)
				return nil, errors.New("it changed as it was read")
			}
			return os.NewFile(uintptr(fd), name), nil
		}
	case unix.S_IFLNK:
		buf := make([]byte, maxName+1)
		n, err := unix.Readlinkat(dirfd, base, buf)
		if err != nil || n > maxName {
			d.note(name, "symlink that cannot be read, not written")
			return nil
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, string(buf[:n])
	case unix.S_IFIFO:
		h.Typeflag = tar.TypeFifo
	case unix.S_IFCHR, unix.S_IFBLK:
		h.Typeflag = tar.TypeChar
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			h.Typeflag = tar.TypeBlock
		}
		h.Devmajor, h.Devminor = int64(unix.Major(uint64(st.Rdev))), int64(unix.Minor(uint64(st.Rdev)))
	default:
		d.note(name, "socket, not written")
		return nil
	}
	if !d.room(h.Name, h.Linkname, h.Size) {
		d.out.Truncated, d.out.Omitted = true, name
		return errStop
	}
	var data *os.File
	if open != nil {
		var err error
		if data, err = open(); err != nil {
			d.note(name, "cannot open: "+err.Error())
			return nil
		}
		defer data.Close()
	}
	if err := d.tw.WriteHeader(h); err != nil {
		return err
	}
	d.out.Entries++
	if data != nil {
		n, err := io.Copy(d.tw, io.LimitReader(data, h.Size))
		if err != nil && !errors.Is(err, io.EOF) {
			var pe *os.PathError
			if !errors.As(err, &pe) {
				return err // the writer failed
			}
			d.note(name, "read failed, the rest written as zeros: "+pe.Err.Error())
		} else if n < h.Size {
			d.note(name, "shrank as it was read, the rest written as zeros")
		}
		if n < h.Size {
			if _, err := io.CopyN(d.tw, zeros{}, h.Size-n); err != nil {
				return err
			}
		}
	}
	if h.Typeflag == tar.TypeDir {
		if depth+1 >= maxWriteDepth {
			d.note(name, fmt.Sprintf("deeper than %d directories, contents not written", maxWriteDepth))
			return nil
		}
		fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			d.note(name, "cannot open directory: "+err.Error())
			return nil
		}
		sub := os.NewFile(uintptr(fd), name)
		defer sub.Close()
		return d.walk(sub, name, depth+1)
	}
	return nil
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
