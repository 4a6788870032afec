// File trees in and out of a run at the terminal: --file copies host files
// and directories into the sandbox's working directory (client.WalkDir reads
// them without following a link), --outputs writes what the script left
// there back, root-confined and without following a link.

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
)

// maxInputFile bounds one file given with --file; the workdir's tmpfs caps
// the total (runtime.ValidateInputs).
const maxInputFile = 256 << 20

// errFileFlagUsage marks --file errors that are usage errors (exit 2).
var errFileFlagUsage = errors.New("--file usage")

type fileUsageError struct{ msg string }

func (e *fileUsageError) Error() string        { return e.msg }
func (e *fileUsageError) Is(target error) bool { return target == errFileFlagUsage }

func fileUsage(format string, args ...any) error {
	return &fileUsageError{fmt.Sprintf(format, args...)}
}

// splitFileFlag splits --file PATH[:NAME] at its last colon; a PATH that
// itself holds a colon is taken whole when it exists and its prefix does not.
func splitFileFlag(spec string) (host, name string) {
	i := strings.LastIndexByte(spec, ':')
	if i <= 0 {
		return spec, ""
	}
	if _, err := os.Lstat(spec); err == nil {
		if _, err := os.Lstat(spec[:i]); err != nil {
			return spec, ""
		}
	}
	return spec[:i], spec[i+1:]
}

// filesFromFlags reads every --file PATH[:NAME] into input entries. PATH
// itself is followed if it is a link (it was named on the command line);
// inside a directory nothing is: links are copied as links, special files
// are refused, so what the sandbox gets is exactly the tree on disk.
func filesFromFlags(specs []string) ([]runtime.InputFile, error) {
	var out []runtime.InputFile
	seen := map[string]string{} // name -> the --file that gave it
	for _, spec := range specs {
		if spec == "" {
			return nil, fileUsage("--file needs a PATH")
		}
		host, name := splitFileFlag(spec)
		if name == "" {
			if strings.HasSuffix(spec, ":") {
				return nil, fileUsage("--file %s: NAME after the colon is empty: write PATH or PATH:NAME", spec)
			}
			name = filepath.Base(filepath.Clean(host))
		}
		if err := runtime.ValidateInputName(name); err != nil {
			return nil, fileUsage("--file %s: %s; give a relative NAME with --file PATH:NAME", spec, errkind.Detail(err, runtime.ErrInvalidJob))
		}
		if prev := seen[name]; prev != "" {
			return nil, fileUsage("--file %s: --file %s already has the name %q in the working directory: rename one with --file PATH:NAME", spec, prev, name)
		}
		seen[name] = spec
		st, err := os.Stat(host)
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", host, unwrapPathError(err))
		}
		switch {
		case st.Mode().IsRegular():
			f, err := os.Open(host)
			if err != nil {
				return nil, fmt.Errorf("--file %s: %w", host, unwrapPathError(err))
			}
			data, err := readInputFile(f, spec)
			f.Close()
			if err != nil {
				return nil, err
			}
			out = append(out, runtime.InputFile{Name: name, Data: data, Mode: uint32(st.Mode().Perm())})
		case st.IsDir():
			entries, err := dirInputs(host, name, spec)
			if err != nil {
				return nil, err
			}
			out = append(out, entries...)
		default:
			return nil, fileUsage("--file %s: not a regular file or directory (%s): special files cannot be copied into the sandbox", spec, st.Mode().Type())
		}
		if len(out) > runtime.MaxInputEntries {
			return nil, fileUsage("--file %s: more than %d files and directories in all", spec, runtime.MaxInputEntries)
		}
	}
	if err := runtime.ValidateInputs(out, math.MaxInt64); err != nil {
		return nil, fileUsage("--file: %s", errkind.Detail(err, runtime.ErrInvalidJob))
	}
	return out, nil
}

func readInputFile(f *os.File, spec string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxInputFile+1))
	if err != nil {
		return nil, fmt.Errorf("--file %s: %w", spec, err)
	}
	if len(data) > maxInputFile {
		return nil, fileUsage("--file %s: %s is over the %s limit for one input file", spec, f.Name(), policy.FormatSize(maxInputFile))
	}
	return data, nil
}

// dirInputs reads the tree at host into entries under name: the directory
// itself, then its contents in lexical order (client.WalkDir: no link is
// followed on the host, special files are refused).
func dirInputs(host, name, spec string) ([]runtime.InputFile, error) {
	var out []runtime.InputFile
	err := client.WalkDir(host, name, maxInputFile, func(e client.DirEntry) error {
		if len(out) >= runtime.MaxInputEntries {
			return fileUsage("--file %s: more than %d files and directories", spec, runtime.MaxInputEntries)
		}
		if err := runtime.ValidateInputName(e.Name); err != nil {
			return fileUsage("--file %s: %s: %s", spec, quoteUnprintable(e.HostPath), errkind.Detail(err, runtime.ErrInvalidJob))
		}
		f := runtime.InputFile{Name: e.Name, Data: e.Data, Mode: e.Mode}
		switch e.Type {
		case api.FileTypeDir:
			f.Kind = runtime.InputDir
		case api.FileTypeSymlink:
			f.Kind, f.Target, f.Mode = runtime.InputSymlink, e.Target, 0
		}
		out = append(out, f)
		return nil
	})
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, errFileFlagUsage):
		return nil, err
	case errors.Is(err, client.ErrNotCopyable):
		return nil, fileUsage("--file %s: %s", spec, strings.TrimSuffix(err.Error(), ": "+client.ErrNotCopyable.Error()))
	default:
		return nil, fmt.Errorf("--file %s: %w", spec, unwrapPathError(err))
	}
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// prepareOutputsDir makes sure --outputs names a usable directory before
// the run, so a script's outputs are not lost to a typo afterwards.
func prepareOutputsDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--outputs %s: %w", dir, unwrapPathError(err))
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("--outputs %s: %w", dir, unwrapPathError(err))
	}
	return root.Close()
}

// saveOutputs writes collected outputs under dir, keeping their relative
// paths, without ever leaving it or following a link: every path must be
// local, each directory on the way is made or must be a real directory (a
// symlink there is refused, not followed), and a file is written fresh,
// replacing a regular file or symlink in its place but never writing
// through it. Special files and directories in the way are refused.
func saveOutputs(dir string, outs []runtime.OutputFile) ([]string, error) {
	if err := prepareOutputsDir(dir); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("--outputs %s: %w", dir, err)
	}
	defer root.Close()
	made := map[string]bool{} // directories already checked or made
	var saved []string
	for _, o := range outs {
		rel := filepath.FromSlash(o.Path)
		if !filepath.IsLocal(rel) {
			return saved, fmt.Errorf("--outputs: output %q is not a relative path inside the working directory; not saved", o.Path)
		}
		if err := outputParents(root, filepath.Dir(rel), made); err != nil {
			return saved, fmt.Errorf("--outputs %s: %s: %w", dir, o.Path, err)
		}
		if st, err := root.Lstat(rel); err == nil {
			switch {
			case st.Mode().IsRegular(), st.Mode()&fs.ModeSymlink != 0:
				// Replace, never write through (a symlink must not
				// redirect the write).
				if err := root.Remove(rel); err != nil {
					return saved, fmt.Errorf("--outputs %s: %s: %w", dir, o.Path, err)
				}
			default:
				return saved, fmt.Errorf("--outputs %s: %s: a %s is in the way; not replaced (move it away and run again)", dir, o.Path, client.FileKind(st.Mode()))
			}
		}
		f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if err != nil {
			return saved, fmt.Errorf("--outputs %s: %s: %w", dir, o.Path, err)
		}
		_, werr := f.Write(o.Data)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return saved, fmt.Errorf("--outputs %s: %s: %w", dir, o.Path, werr)
		}
		saved = append(saved, filepath.Join(dir, rel))
	}
	return saved, nil
}

// outputParents makes the directories of rel inside root, one component at
// a time; an existing component must be a directory, not a link to one.
func outputParents(root *os.Root, rel string, made map[string]bool) error {
	if rel == "." || made[rel] {
		return nil
	}
	if err := outputParents(root, filepath.Dir(rel), made); err != nil {
		return err
	}
	st, err := root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := root.Mkdir(rel, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case st.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink in the outputs directory; refusing to write through it (remove it and run again)", rel)
	case !st.IsDir():
		return fmt.Errorf("%s is a %s, not a directory; not replaced (move it away and run again)", rel, client.FileKind(st.Mode()))
	}
	made[rel] = true
	return nil
}
