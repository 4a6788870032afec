package runtime

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/skillbox/skillbox/runtime/errkind"
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
		return errkind.Errorf(ErrInvalidJob, "input %s %s", QuoteName(name), why)
	}
	switch {
	case name == "":
		return errkind.Errorf(ErrInvalidJob, "input name is empty: give a relative path such as \"in.txt\" or \"dir/in.txt\"")
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

// QuoteName shows a caller- or script-chosen name safely in a message.
func QuoteName(name string) string {
	if len(name) > 128 {
		name = strings.ToValidUTF8(name[:128], "") + "..."
	}
	return strconv.Quote(name)
}

// EffectiveKind is Kind, with "" meaning InputRegular.
func (f *InputFile) EffectiveKind() InputKind {
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
		return errkind.Errorf(ErrInvalidJob, "%d input entries, at most %d", len(files), MaxInputEntries)
	}
	kinds := make(map[string]InputKind, len(files))
	var total int64
	for i := range files {
		f := &files[i]
		if err := ValidateInputName(f.Name); err != nil {
			return err
		}
		q := QuoteName(f.Name)
		k := f.EffectiveKind()
		switch k {
		case InputRegular:
			if f.Target != "" {
				return errkind.Errorf(ErrInvalidJob, "input %s is a file and cannot have a link target", q)
			}
		case InputDir:
			if len(f.Data) > 0 || f.Target != "" {
				return errkind.Errorf(ErrInvalidJob, "input %s is a directory and cannot have data or a link target", q)
			}
		case InputSymlink:
			switch {
			case len(f.Data) > 0:
				return errkind.Errorf(ErrInvalidJob, "input %s is a symlink and cannot have data", q)
			case f.Target == "":
				return errkind.Errorf(ErrInvalidJob, "input %s is a symlink without a target", q)
			case len(f.Target) > MaxInputTargetSize:
				return errkind.Errorf(ErrInvalidJob, "input %s: link target is %d bytes, at most %d", q, len(f.Target), MaxInputTargetSize)
			case strings.IndexByte(f.Target, 0) >= 0:
				return errkind.Errorf(ErrInvalidJob, "input %s: link target contains a NUL byte", q)
			}
		default:
			return errkind.Errorf(ErrInvalidJob, "input %s has unknown kind %q: use %q, %q or %q", q, f.Kind, InputRegular, InputDir, InputSymlink)
		}
		if f.Mode&^0o777 != 0 {
			return errkind.Errorf(ErrInvalidJob, "input %s mode %#o: only permission bits are allowed", q, f.Mode)
		}
		if _, dup := kinds[f.Name]; dup {
			return errkind.Errorf(ErrInvalidJob, "input %s given twice", q)
		}
		if f.Name == path.Base(OutputsDir) && k != InputDir {
			return errkind.Errorf(ErrInvalidJob, "input %s is reserved for the outputs folder (it may only be a directory)", q)
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
				return errkind.Errorf(ErrInvalidJob, "input %s lies under %s, which is a %s, not a directory", QuoteName(name), QuoteName(parent), kindWord(k))
			}
			next := strings.IndexByte(name[j+1:], '/')
			if next < 0 {
				break
			}
			j += 1 + next
		}
	}
	if total > workdirBytes {
		return errkind.Errorf(ErrInvalidJob, "input files total %d bytes, over the %d-byte workdir", total, workdirBytes)
	}
	return nil
}

func kindWord(k InputKind) string {
	if k == InputSymlink {
		return "symlink"
	}
	return "file"
}
