package runtime

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Inputs come from callers (a model, a host) and name paths inside the
// workdir, so their names are confined before anything touches the file
// system: relative, no "." or ".." components, no empty components, no
// control characters, bounded. They are written with no-follow semantics
// (every component opened relative to its already-open parent with
// O_NOFOLLOW), and no entry may lie under a file or symlink entry, so a
// symlink passed in can never redirect a later entry out of the workdir.

// Caps on a job's inputs.
const (
	MaxInputEntries    = 20000 // entries (files, directories, links) per job
	MaxInputPathBytes  = 1024  // bytes of one entry's name
	MaxInputDepth      = 32    // components of one entry's name
	MaxInputTargetSize = 1024  // bytes of a symlink's target
	maxComponentBytes  = 255   // NAME_MAX
)

// ValidateInputName checks that name is a confined relative path for an
// input entry: "/"-separated, not absolute, no empty, "." or ".."
// components, valid UTF-8 without control characters (NUL included), at
// most MaxInputPathBytes bytes and MaxInputDepth components of at most 255
// bytes. The error wraps ErrInvalidJob and names the entry (quoted).
func ValidateInputName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: input %s %s", ErrInvalidJob, quoteName(name), why)
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: input name is empty: give a relative path such as \"in.txt\" or \"dir/in.txt\"", ErrInvalidJob)
	case len(name) > MaxInputPathBytes:
		return bad(fmt.Sprintf("is %d bytes long, at most %d", len(name), MaxInputPathBytes))
	case !utf8.ValidString(name):
		return bad("is not valid UTF-8")
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return bad("contains a control character (or NUL): rename it")
	case name[0] == '/':
		return bad("is an absolute path: give a path relative to the working directory")
	}
	depth := 0
	for comp := range strings.SplitSeq(name, "/") {
		depth++
		switch {
		case comp == "":
			return bad("has an empty path component (\"//\" or a trailing \"/\")")
		case comp == "..":
			return bad("has a \"..\" component: inputs must stay inside the working directory")
		case comp == ".":
			return bad("has a \".\" component: write the path without it")
		case len(comp) > maxComponentBytes:
			return bad(fmt.Sprintf("has a component of %d bytes, at most %d", len(comp), maxComponentBytes))
		}
	}
	if depth > MaxInputDepth {
		return bad(fmt.Sprintf("is %d levels deep, at most %d", depth, MaxInputDepth))
	}
	return nil
}

// quoteName shows a caller- or script-chosen name safely in a message.
func quoteName(name string) string {
	if len(name) > 128 {
		name = strings.ToValidUTF8(name[:128], "") + "..."
	}
	return strconv.Quote(name)
}

func (f *InputFile) kind() InputKind {
	if f.Kind == "" {
		return InputRegular
	}
	return f.Kind
}

// ValidateInputs checks input entries the way ValidateJob does: every name
// (ValidateInputName), kind and mode, no name twice, no entry under a file
// or symlink entry, "outputs" only as a directory, at most MaxInputEntries,
// and file bytes in total at most workdirBytes (the run's
// Limits.WorkdirBytes). Errors wrap ErrInvalidJob and name the entry.
func ValidateInputs(files []InputFile, workdirBytes int64) error {
	if len(files) > MaxInputEntries {
		return fmt.Errorf("%w: %d input entries, at most %d", ErrInvalidJob, len(files), MaxInputEntries)
	}
	kinds := make(map[string]InputKind, len(files))
	var total int64
	for i := range files {
		f := &files[i]
		if err := ValidateInputName(f.Name); err != nil {
			return err
		}
		q := quoteName(f.Name)
		k := f.kind()
		switch k {
		case InputRegular:
			if f.Target != "" {
				return fmt.Errorf("%w: input %s is a file and cannot have a link target", ErrInvalidJob, q)
			}
		case InputDir:
			if len(f.Data) > 0 || f.Target != "" {
				return fmt.Errorf("%w: input %s is a directory and cannot have data or a link target", ErrInvalidJob, q)
			}
		case InputSymlink:
			switch {
			case len(f.Data) > 0:
				return fmt.Errorf("%w: input %s is a symlink and cannot have data", ErrInvalidJob, q)
			case f.Target == "":
				return fmt.Errorf("%w: input %s is a symlink without a target", ErrInvalidJob, q)
			case len(f.Target) > MaxInputTargetSize:
				return fmt.Errorf("%w: input %s: link target is %d bytes, at most %d", ErrInvalidJob, q, len(f.Target), MaxInputTargetSize)
			case strings.IndexByte(f.Target, 0) >= 0:
				return fmt.Errorf("%w: input %s: link target contains a NUL byte", ErrInvalidJob, q)
			}
		default:
			return fmt.Errorf("%w: input %s has unknown kind %q: use %q, %q or %q", ErrInvalidJob, q, f.Kind, InputRegular, InputDir, InputSymlink)
		}
		if f.Mode&^0o777 != 0 {
			return fmt.Errorf("%w: input %s mode %#o: only permission bits are allowed", ErrInvalidJob, q, f.Mode)
		}
		if _, dup := kinds[f.Name]; dup {
			return fmt.Errorf("%w: input %s given twice", ErrInvalidJob, q)
		}
		if f.Name == path.Base(OutputsDir) && k != InputDir {
			return fmt.Errorf("%w: input %s is reserved for the outputs folder (it may only be a directory)", ErrInvalidJob, q)
		}
		kinds[f.Name] = k
		total += int64(len(f.Data))
	}
	// No entry may lie under a file or a symlink: the first cannot hold it,
	// the second would send it wherever the link points.
	for i := range files {
		name := files[i].Name
		for j := strings.IndexByte(name, '/'); j >= 0; {
			parent := name[:j]
			if k, ok := kinds[parent]; ok && k != InputDir {
				return fmt.Errorf("%w: input %s lies under %s, which is a %s, not a directory", ErrInvalidJob, quoteName(name), quoteName(parent), kindWord(k))
			}
			next := strings.IndexByte(name[j+1:], '/')
			if next < 0 {
				break
			}
			j += 1 + next
		}
	}
	if total > workdirBytes {
		return fmt.Errorf("%w: input files total %d bytes, over the %d-byte workdir", ErrInvalidJob, total, workdirBytes)
	}
	return nil
}

func kindWord(k InputKind) string {
	if k == InputSymlink {
		return "symlink"
	}
	return "file"
}

// inputRecord is what was written for one input entry, so that collecting
// outputs can tell unchanged inputs from what the script changed.
type inputRecord struct {
	kind   InputKind
	data   []byte // InputRegular: the bytes written (the job's own slice)
	target string // InputSymlink
	fp     fingerprint
}

// fingerprint is the host-side identity and change state of a file: if all
// of it is equal after the run the file was not written to (ctime moves on
// every write, chmod or utimes, and the script cannot set it). When it
// differs, the content is compared with what was written.
type fingerprint struct {
	ino          uint64
	size         int64
	mtime, ctime unix.Timespec
}

func fingerprintOf(st *unix.Stat_t) fingerprint {
	return fingerprint{ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// inputManifest maps workdir-relative paths to what was written there.
type inputManifest map[string]*inputRecord

// inputWriter creates input entries beneath the open workdir, never
// following a link, owned by the container user. It keeps the last parent
// directory open, since entries usually come grouped by directory.
type inputWriter struct {
	wd       int
	uid, gid int
	lastDir  string
	lastFD   int
	manifest inputManifest
}

func (w *inputWriter) close() {
	if w.lastFD >= 0 && w.lastFD != w.wd {
		unix.Close(w.lastFD)
	}
	w.lastFD, w.lastDir = -1, ""
}

// dir returns an fd of the directory rel (relative to the workdir),
// creating missing components (0755, owned by the container user). Every
// component is opened with O_NOFOLLOW|O_DIRECTORY from its parent, so a
// symlink anywhere on the way is an error, not a detour.
func (w *inputWriter) dir(rel string) (int, error) {
	if rel == "" || rel == "." {
		return w.wd, nil
	}
	if rel == w.lastDir && w.lastFD >= 0 {
		return w.lastFD, nil
	}
	w.close()
	fd := w.wd
	for comp := range strings.SplitSeq(rel, "/") {
		next, err := w.mkdirOpen(fd, comp, 0o755, false)
		if fd != w.wd {
			unix.Close(fd)
		}
		if err != nil {
			return -1, fmt.Errorf("input directory %s: %w", quoteName(rel), err)
		}
		fd = next
	}
	w.lastDir, w.lastFD = rel, fd
	return fd, nil
}

// mkdirOpen makes directory name in parent unless it exists and opens it
// without following links. With setMode an existing one gets mode too.
func (w *inputWriter) mkdirOpen(parent int, name string, mode uint32, setMode bool) (int, error) {
	created := true
	if err := unix.Mkdirat(parent, name, mode); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		created = false
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if created || setMode {
		err = unix.Fchown(fd, w.uid, w.gid)
		if err == nil {
			err = unix.Fchmod(fd, mode) // not subject to umask
		}
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// write creates one validated entry and records it in the manifest.
func (w *inputWriter) write(f *InputFile) error {
	parent, base := path.Split(f.Name)
	parent = strings.TrimSuffix(parent, "/")
	dfd, err := w.dir(parent)
	if err != nil {
		return err
	}
	switch f.kind() {
	case InputDir:
		mode := f.Mode & 0o777
		if mode == 0 {
			mode = 0o755
		}
		fd, err := w.mkdirOpen(dfd, base, mode, true)
		if err != nil {
			return fmt.Errorf("create input directory %s: %w", quoteName(f.Name), err)
		}
		unix.Close(fd)
		w.manifest[f.Name] = &inputRecord{kind: InputDir}
	case InputSymlink:
		if err := unix.Symlinkat(f.Target, dfd, base); err != nil {
			return fmt.Errorf("create input symlink %s: %w", quoteName(f.Name), err)
		}
		if err := unix.Fchownat(dfd, base, w.uid, w.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown input symlink %s: %w", quoteName(f.Name), err)
		}
		w.manifest[f.Name] = &inputRecord{kind: InputSymlink, target: f.Target}
	default:
		mode := f.Mode & 0o777
		if mode == 0 {
			mode = 0o644
		}
		fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err != nil {
			return fmt.Errorf("create input file %s: %w", quoteName(f.Name), err)
		}
		file := os.NewFile(uintptr(fd), base)
		_, werr := file.Write(f.Data)
		if werr == nil {
			werr = file.Chown(w.uid, w.gid)
		}
		if werr == nil {
			werr = file.Chmod(os.FileMode(mode)) // not subject to umask
		}
		var st unix.Stat_t
		if werr == nil {
			werr = unix.Fstat(fd, &st)
		}
		cerr := file.Close()
		if werr != nil || cerr != nil {
			return fmt.Errorf("write input file %s: %w", quoteName(f.Name), errors.Join(werr, cerr))
		}
		w.manifest[f.Name] = &inputRecord{kind: InputRegular, data: f.Data, fp: fingerprintOf(&st)}
	}
	return nil
}
