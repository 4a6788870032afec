package client

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/skillbox/skillbox/sandbox/api"
)

// A host passes a directory to a run (an unpacked document, a skill folder
// to validate) as input entries. Reading it must not leak anything the
// tree merely points at: links are sent as links and never followed,
// special files are refused, and the walk stays inside the directory.

// ErrNotCopyable is wrapped by WalkDir errors about an entry that cannot
// be sent to a run as it is: a special file (fifo, socket, device), a file
// over the size limit, or one that changed while it was read.
var ErrNotCopyable = errors.New("cannot be copied into the sandbox")

// MaxDirFileBytes bounds one file DirFiles reads.
const MaxDirFileBytes = 256 << 20

// DirEntry is one entry WalkDir found: Name is its path in the run's
// working directory ("/"-separated, under the name WalkDir was given),
// HostPath where it was read, Type one of api.FileType*, Data a file's
// bytes, Target a link's target, Mode the permission bits.
type DirEntry struct {
	Name     string
	HostPath string
	Type     string
	Data     []byte
	Target   string
	Mode     uint32
}

// WalkDir reads the tree at hostDir and calls fn with the directory itself
// (named name) and then every entry under it, in lexical order. It works
// inside an os.Root and opens files with O_NOFOLLOW, so no link is followed
// on the host: a symlink is reported as one (its target verbatim), a
// special file or a file over maxFileBytes is an error wrapping
// ErrNotCopyable that names it. hostDir itself may be a link (the caller
// named it). An error from fn stops the walk and is returned.
func WalkDir(hostDir, name string, maxFileBytes int64, fn func(DirEntry) error) error {
	root, err := os.OpenRoot(hostDir)
	if err != nil {
		return err
	}
	defer root.Close()
	st, err := root.Stat(".")
	if err != nil {
		return err
	}
	if err := fn(DirEntry{Name: name, HostPath: hostDir, Type: api.FileTypeDir, Mode: uint32(st.Mode().Perm())}); err != nil {
		return err
	}
	return fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		e := DirEntry{Name: name + "/" + rel, HostPath: filepath.Join(hostDir, filepath.FromSlash(rel))}
		switch t := d.Type(); {
		case t.IsDir():
			info, err := d.Info()
			if err != nil {
				return err
			}
			e.Type, e.Mode = api.FileTypeDir, uint32(info.Mode().Perm())
		case t&fs.ModeSymlink != 0:
			target, err := root.Readlink(rel)
			if err != nil {
				return err
			}
			e.Type, e.Target = api.FileTypeSymlink, target
		case t.IsRegular():
			data, mode, err := readNoFollow(root, rel, e.HostPath, maxFileBytes)
			if err != nil {
				return err
			}
			e.Type, e.Data, e.Mode = api.FileTypeFile, data, mode
		default:
			return fmt.Errorf("%s is a special file (%s), which %w: remove it or pass the directory without it", e.HostPath, FileKind(t), ErrNotCopyable)
		}
		return fn(e)
	})
}

// readNoFollow reads the regular file rel of root, refusing one that is a
// link, no longer a regular file, or larger than max.
func readNoFollow(root *os.Root, rel, where string, max int64) ([]byte, uint32, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s changed while it was read: %w", where, ErrNotCopyable)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(data)) > max {
		return nil, 0, fmt.Errorf("%s is larger than the %d-byte limit for one input file: %w", where, max, ErrNotCopyable)
	}
	return data, uint32(info.Mode().Perm()), nil
}

// DirFiles reads the directory hostDir into the input entries of a run
// (RunScriptParams.Files) under the relative name (e.g. "unpacked"): the
// directory, its subdirectories, files (base64, at most MaxDirFileBytes
// each) and symlinks as symlinks, never followed (see WalkDir).
func DirFiles(hostDir, name string) ([]api.File, error) {
	var out []api.File
	err := WalkDir(hostDir, name, MaxDirFileBytes, func(e DirEntry) error {
		f := api.File{Name: e.Name, Mode: e.Mode}
		switch e.Type {
		case api.FileTypeDir:
			f.Type = api.FileTypeDir
		case api.FileTypeSymlink:
			f.Type, f.Target, f.Mode = api.FileTypeSymlink, e.Target, 0
		default:
			f = api.NewFile(e.Name, e.Data)
			f.Mode = e.Mode
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("input directory %s: %w", hostDir, err)
	}
	return out, nil
}

// FileKind names the kind of file a mode stands for, for messages
// ("fifo", "symlink", "directory", ...).
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}
