package oci

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/skillbox/skillbox/runtime"
	"golang.org/x/sys/unix"
)

// inputRecord is what was written for one input entry, so that collecting
// outputs can tell unchanged inputs from what the script changed.
type inputRecord struct {
	kind   runtime.InputKind
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
			return -1, fmt.Errorf("input directory %s: %w", runtime.QuoteName(rel), err)
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
func (w *inputWriter) write(f *runtime.InputFile) error {
	parent, base := path.Split(f.Name)
	parent = strings.TrimSuffix(parent, "/")
	dfd, err := w.dir(parent)
	if err != nil {
		return err
	}
	switch f.EffectiveKind() {
	case runtime.InputDir:
		mode := f.Mode & 0o777
		if mode == 0 {
			mode = 0o755
		}
		fd, err := w.mkdirOpen(dfd, base, mode, true)
		if err != nil {
			return fmt.Errorf("create input directory %s: %w", runtime.QuoteName(f.Name), err)
		}
		unix.Close(fd)
		w.manifest[f.Name] = &inputRecord{kind: runtime.InputDir}
	case runtime.InputSymlink:
		if err := unix.Symlinkat(f.Target, dfd, base); err != nil {
			return fmt.Errorf("create input symlink %s: %w", runtime.QuoteName(f.Name), err)
		}
		if err := unix.Fchownat(dfd, base, w.uid, w.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown input symlink %s: %w", runtime.QuoteName(f.Name), err)
		}
		w.manifest[f.Name] = &inputRecord{kind: runtime.InputSymlink, target: f.Target}
	default:
		mode := f.Mode & 0o777
		if mode == 0 {
			mode = 0o644
		}
		fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err != nil {
			return fmt.Errorf("create input file %s: %w", runtime.QuoteName(f.Name), err)
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
			return fmt.Errorf("write input file %s: %w", runtime.QuoteName(f.Name), errors.Join(werr, cerr))
		}
		w.manifest[f.Name] = &inputRecord{kind: runtime.InputRegular, data: f.Data, fp: fingerprintOf(&st)}
	}
	return nil
}
