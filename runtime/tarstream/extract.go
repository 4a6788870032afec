package tarstream

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/skillbox/skillbox/runtime/oci"
)

// ErrUnsafe is the kind of a stream Extract refuses: an entry that would
// land outside its directory, lie beneath a link, link outside the
// stream, or make a device; or one past a bound.
var ErrUnsafe = errors.New("unsafe tar stream")

// DefaultMaxEntries is ExtractOptions.MaxEntries' default: the inputs'
// cap (runtime.MaxInputEntries) with room for a skill's files.
const DefaultMaxEntries = 1 << 16

// maxName bounds an entry's name and a link's target (PATH_MAX).
const maxName = 4096

// ExtractOptions are Extract's settings.
type ExtractOptions struct {
	// ReadOnly makes every file 0444 (0555 when the stream gives it any
	// execute bit) and every directory 0555, owned by the extracting
	// process whatever the stream says: files a job reads and must not
	// change, as a job of another uid cannot chmod them back.
	ReadOnly bool
	// MaxEntries bounds the entries of the stream (0: DefaultMaxEntries).
	MaxEntries int
}

// Extracted is what Extract made.
type Extracted struct {
	Entries int
	Bytes   int64 // of regular files
}

// Extract unpacks the tar stream r, which a peer sent, into root, a fresh
// private directory, strictly: every entry is made as the stream says
// (mode, owner) or the whole stream is refused, with an ErrUnsafe error
// naming the entry, for an absolute name, a ".." in a name, an entry
// beneath a symlink of the stream, a hard link to anything but a regular
// file earlier in the stream, a device, fifo or sparse file, a name twice,
// or more than MaxEntries entries. Setuid, setgid and sticky bits are
// dropped. Symlinks are made with the target the stream gives (the job
// reads through them inside its sandbox) and never followed here. On an
// error what was made stays in root: the caller removes it.
//
// Directories are made 0700 as the stream is read and get their own
// modes and owners at the end (a read-only directory is then filled
// first); a directory a name needs that the stream does not give is
// 0755 (read-only: 0555), owned as the entry that needed it.
func Extract(r io.Reader, root *os.Root, opts ExtractOptions) (Extracted, error) {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	x := &extractor{root: root, opts: opts, kinds: map[string]byte{}, dirs: map[string]dirMeta{}}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return x.out, fmt.Errorf("read the tar stream: %w", err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue // PAX defaults for later entries, which archive/tar applies
		}
		if x.out.Entries++; x.out.Entries > opts.MaxEntries {
			return x.out, unsafef("more than %d entries", opts.MaxEntries)
		}
		if err := x.entry(h, tr); err != nil {
			return x.out, err
		}
	}
	return x.out, x.finish()
}

func unsafef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsafe}, args...)...)
}

// dirMeta is a directory's mode and owner, set once the stream is read.
type dirMeta struct {
	mode     os.FileMode
	uid, gid int
}

type extractor struct {
	root  *os.Root
	opts  ExtractOptions
	out   Extracted
	kinds map[string]byte // every name made: its tar type
	dirs  map[string]dirMeta
}

// cleanName is a tar entry's name as a clean relative path, or why not:
// "./a/b", "a/b/" and "a/b" are "a/b"; "." is the directory itself.
func cleanName(name string) (string, error) {
	if len(name) > maxName {
		return "", unsafef("a name of %d bytes, at most %d", len(name), maxName)
	}
	if strings.HasPrefix(name, "/") {
		return "", unsafef("%s: an absolute name", oci.ReportName(name))
	}
	n := strings.TrimSuffix(name, "/")
	for strings.HasPrefix(n, "./") {
		n = n[2:]
	}
	if n == "." || n == "" {
		return ".", nil
	}
	for _, c := range strings.Split(n, "/") {
		if c == ".." {
			return "", unsafef("%s: a name with \"..\" in it", oci.ReportName(name))
		}
		if c == "" || c == "." {
			return "", unsafef("%s: not a clean name", oci.ReportName(name))
		}
	}
	return n, nil
}

// mode is what an entry of the stream's mode becomes.
func (x *extractor) mode(h *tar.Header, dir bool) os.FileMode {
	m := os.FileMode(h.Mode) & 0o777
	switch {
	case x.opts.ReadOnly && dir:
		return 0o555
	case x.opts.ReadOnly && m&0o111 != 0:
		return 0o555
	case x.opts.ReadOnly:
		return 0o444
	}
	return m
}

// owner is who an entry belongs to (-1: the extracting process, unchanged).
func (x *extractor) owner(h *tar.Header) (int, int, error) {
	if x.opts.ReadOnly {
		return -1, -1, nil
	}
	if h.Uid < 0 || h.Gid < 0 || h.Uid > 1<<31-2 || h.Gid > 1<<31-2 {
		return 0, 0, unsafef("%s: owner %d:%d", oci.ReportName(h.Name), h.Uid, h.Gid)
	}
	return h.Uid, h.Gid, nil
}

// parents makes the directories name needs, checking that none is a
// symlink or a file of the stream.
func (x *extractor) parents(name string, uid, gid int) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	for p := dir; p != "."; p = path.Dir(p) {
		switch k, ok := x.kinds[p]; {
		case !ok:
			continue
		case k == tar.TypeSymlink:
			return unsafef("%s: beneath %s, a symlink of the stream", oci.ReportName(name), oci.ReportName(p))
		case k != tar.TypeDir:
			return unsafef("%s: beneath %s, a file of the stream", oci.ReportName(name), oci.ReportName(p))
		}
	}
	var missing []string
	for p := dir; p != "."; p = path.Dir(p) {
		if _, ok := x.kinds[p]; ok {
			break
		}
		missing = append(missing, p)
	}
	slices.Reverse(missing)
	for _, p := range missing {
		if err := x.root.Mkdir(p, 0o700); err != nil {
			return fmt.Errorf("make directory %s: %w", oci.ReportName(p), err)
		}
		x.kinds[p] = tar.TypeDir
		mode := os.FileMode(0o755)
		if x.opts.ReadOnly {
			mode = 0o555
		}
		x.dirs[p] = dirMeta{mode: mode, uid: uid, gid: gid}
	}
	return nil
}

func (x *extractor) entry(h *tar.Header, tr io.Reader) error {
	name, err := cleanName(h.Name)
	if err != nil {
		return err
	}
	q := oci.ReportName(name)
	uid, gid, err := x.owner(h)
	if err != nil {
		return err
	}
	if name == "." {
		if h.Typeflag != tar.TypeDir {
			return unsafef("the stream's root entry is of type %q, not a directory", h.Typeflag)
		}
		return nil // dir itself: its caller's, mode and owner kept
	}
	if k, dup := x.kinds[name]; dup && !(k == tar.TypeDir && h.Typeflag == tar.TypeDir) {
		return unsafef("%s: twice in the stream", q)
	}
	if err := x.parents(name, uid, gid); err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if _, ok := x.kinds[name]; !ok {
			if err := x.root.Mkdir(name, 0o700); err != nil {
				return fmt.Errorf("make directory %s: %w", q, err)
			}
		}
		x.dirs[name] = dirMeta{mode: x.mode(h, true), uid: uid, gid: gid}
	case tar.TypeReg:
		if SparseEntry(h) {
			return unsafef("%s: a sparse file (send plain files)", q)
		}
		f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("create %s: %w", q, err)
		}
		n, err := io.Copy(f, tr)
		x.out.Bytes += n
		if err == nil {
			err = f.Chmod(x.mode(h, false))
		}
		if err == nil && uid >= 0 {
			err = f.Chown(uid, gid)
		}
		if err := errors.Join(err, f.Close()); err != nil {
			return fmt.Errorf("write %s: %w", q, err)
		}
	case tar.TypeSymlink:
		if len(h.Linkname) > maxName || h.Linkname == "" {
			return unsafef("%s: a symlink target of %d bytes", q, len(h.Linkname))
		}
		if err := x.root.Symlink(h.Linkname, name); err != nil {
			return fmt.Errorf("make symlink %s: %w", q, err)
		}
		if uid >= 0 {
			if err := x.root.Lchown(name, uid, gid); err != nil {
				return fmt.Errorf("own symlink %s: %w", q, err)
			}
		}
	case tar.TypeLink:
		target, err := cleanName(h.Linkname)
		if err != nil {
			return fmt.Errorf("hard link %s: %w", q, err)
		}
		if x.kinds[target] != tar.TypeReg {
			return unsafef("%s: a hard link to %s, which is not a regular file earlier in the stream", q, oci.ReportName(target))
		}
		if err := x.root.Link(target, name); err != nil {
			return fmt.Errorf("make hard link %s: %w", q, err)
		}
		x.kinds[name] = tar.TypeReg
		return nil
	case tar.TypeChar, tar.TypeBlock:
		return unsafef("%s: a device, which is never made", q)
	case tar.TypeFifo:
		return unsafef("%s: a fifo, which is never made", q)
	default:
		return unsafef("%s: a tar entry of type %q", q, h.Typeflag)
	}
	x.kinds[name] = h.Typeflag
	return nil
}

// finish gives every directory its mode and owner, deepest first.
func (x *extractor) finish() error {
	names := make([]string, 0, len(x.dirs))
	for n := range x.dirs {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, n := range names {
		m := x.dirs[n]
		f, err := x.root.Open(n)
		if err != nil {
			return fmt.Errorf("directory %s: %w", oci.ReportName(n), err)
		}
		err = f.Chmod(m.mode)
		if err == nil && m.uid >= 0 {
			err = f.Chown(m.uid, m.gid)
		}
		if err := errors.Join(err, f.Close()); err != nil {
			return fmt.Errorf("directory %s: %w", oci.ReportName(n), err)
		}
	}
	return nil
}
