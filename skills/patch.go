package skills

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Proposed changes to a skill arrive as unified diffs (git's or diff -u's
// format) written by an agent: untrusted input. A diff is parsed and
// applied with go-gitdiff in memory, against the files as the confined
// reader serves them, and only a diff that applies cleanly and leaves a
// valid SKILL.md is accepted. Writing the result never follows a link.

// ErrPatch: a diff does not parse, does not apply, or would leave an
// invalid skill.
var ErrPatch = errors.New("proposed change does not apply")

// ErrReadOnly: the skill's root cannot be written; export the patch instead.
var ErrReadOnly = errors.New("skill root is read-only")

// Limits on a proposed diff.
const (
	MaxDiffBytes     = 1 << 20
	maxPatchedFiles  = 256
	maxPatchedResult = 8 << 20
)

// PatchedFile is one file a diff changes: its new content, or its removal.
type PatchedFile struct {
	Path   string      `json:"path"`
	Delete bool        `json:"delete,omitempty"`
	Mode   fs.FileMode `json:"mode,omitempty"`
	Data   []byte      `json:"-"`
}

// Patch is a diff checked against one version of a skill.
type Patch struct {
	Files []PatchedFile
}

// Paths lists the files the patch changes.
func (p *Patch) Paths() []string {
	out := make([]string, len(p.Files))
	for i, f := range p.Files {
		out[i] = f.Path
	}
	return out
}

// ApplyDiff applies diff to the skill in dir in memory and checks the
// result: every path stays inside the skill, every hunk applies exactly,
// and SKILL.md still parses and validates (opts) with the same name.
// Renames, copies and binary patches are refused.
func ApplyDiff(dir, diff string, opts LoadOptions) (*Patch, error) {
	if len(diff) > MaxDiffBytes {
		return nil, errkind.Errorf(ErrPatch, "the diff is %d bytes, more than %d", len(diff), MaxDiffBytes)
	}
	files, _, err := gitdiff.Parse(strings.NewReader(stripGitPrefixes(diff)))
	if err != nil {
		return nil, errkind.Errorf(ErrPatch, "the diff does not parse: %w", err)
	}
	if len(files) == 0 {
		return nil, errkind.Errorf(ErrPatch, "the diff changes no file; give a unified diff (---/+++ headers and @@ hunks) against the loaded skill")
	}
	if len(files) > maxPatchedFiles {
		return nil, errkind.Errorf(ErrPatch, "the diff changes %d files, at most %d allowed", len(files), maxPatchedFiles)
	}
	p := &Patch{}
	seen := map[string]bool{}
	total := 0
	for _, f := range files {
		if f.IsRename || f.IsCopy {
			return nil, errkind.Errorf(ErrPatch, "%s → %s: renames and copies are not supported; delete and add the file instead", f.OldName, f.NewName)
		}
		if f.IsBinary {
			return nil, errkind.Errorf(ErrPatch, "%s: binary patches are not supported", f.NewName)
		}
		name := f.NewName
		if f.IsDelete {
			name = f.OldName
		}
		rel, err := cleanRel(name)
		if err != nil {
			return nil, errkind.Wrap(ErrPatch, err)
		}
		if seen[rel] {
			return nil, errkind.Errorf(ErrPatch, "%s is changed twice in the diff", rel)
		}
		seen[rel] = true
		var src []byte
		mode := fs.FileMode(0o644)
		existing, rerr := readForPatch(dir, rel)
		switch {
		case rerr == nil && f.IsNew:
			return nil, errkind.Errorf(ErrPatch, "%s already exists in the skill; diff against its content instead of adding it", rel)
		case rerr == nil:
			src, mode = existing.data, existing.mode
		case errors.Is(rerr, ErrNotFound) && f.IsNew:
		case errors.Is(rerr, ErrNotFound):
			return nil, errkind.Errorf(ErrPatch, "%s does not exist in the skill", rel)
		default:
			return nil, errkind.Wrap(ErrPatch, rerr)
		}
		if f.IsDelete {
			var out bytes.Buffer
			if err := gitdiff.Apply(&out, bytes.NewReader(src), f); err != nil {
				return nil, errkind.Errorf(ErrPatch, "%s: %w", rel, err)
			}
			p.Files = append(p.Files, PatchedFile{Path: rel, Delete: true})
			continue
		}
		var out bytes.Buffer
		if err := gitdiff.Apply(&out, bytes.NewReader(src), f); err != nil {
			return nil, errkind.Errorf(ErrPatch, "%s: %w", rel, err)
		}
		total += out.Len()
		if total > maxPatchedResult {
			return nil, errkind.Errorf(ErrPatch, "the changed files would hold more than %d bytes", maxPatchedResult)
		}
		if f.NewMode != 0 {
			mode = f.NewMode.Perm() & 0o755
		}
		p.Files = append(p.Files, PatchedFile{Path: rel, Mode: mode.Perm() | 0o644, Data: out.Bytes()})
	}
	if err := p.checkSkill(dir, opts); err != nil {
		return nil, err
	}
	return p, nil
}

// stripGitPrefixes removes the a/ and b/ of a diff whose ---/+++ headers
// use git's convention without git's "diff --git" lines (what `git diff`
// pasted without its first line, or a model, writes): the parser keeps
// them as part of the names there, so the paths would not be the skill's.
// It is patch -p1, applied only when every header pair has a/ on the old
// side and b/ on the new (or /dev/null). Hunk bodies are skipped by their
// line counts, so a removed line that starts with "-- " is never taken for
// a header.
func stripGitPrefixes(diff string) string {
	if strings.HasPrefix(diff, "diff --git ") || strings.Contains(diff, "\ndiff --git ") {
		return diff // the parser strips them itself
	}
	lines := strings.SplitAfter(diff, "\n")
	var headers []int // index of each "--- " line followed by "+++ "
	oldLeft, newLeft := 0, 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if oldLeft > 0 || newLeft > 0 {
			switch {
			case strings.HasPrefix(l, " "), l == "\n":
				oldLeft, newLeft = oldLeft-1, newLeft-1
			case strings.HasPrefix(l, "-"):
				oldLeft--
			case strings.HasPrefix(l, "+"):
				newLeft--
			case strings.HasPrefix(l, "\\"):
			default:
				oldLeft, newLeft = 0, 0 // malformed: let the parser say so
			}
			continue
		}
		if m := hunkHeader.FindStringSubmatch(l); m != nil {
			oldLeft, newLeft = hunkCount(m[1]), hunkCount(m[2])
			continue
		}
		if strings.HasPrefix(l, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ ") {
			headers = append(headers, i)
			i++
		}
	}
	if len(headers) == 0 {
		return diff
	}
	prefixed := func(l, marker, prefix string) (bool, bool) {
		name := strings.TrimPrefix(l, marker)
		if strings.HasPrefix(name, "/dev/null") {
			return true, false
		}
		return strings.HasPrefix(name, prefix), true
	}
	for _, i := range headers {
		okOld, hasOld := prefixed(lines[i], "--- ", "a/")
		okNew, hasNew := prefixed(lines[i+1], "+++ ", "b/")
		if !okOld || !okNew || (!hasOld && !hasNew) {
			return diff
		}
	}
	for _, i := range headers {
		lines[i] = "--- " + strings.TrimPrefix(strings.TrimPrefix(lines[i], "--- "), "a/")
		lines[i+1] = "+++ " + strings.TrimPrefix(strings.TrimPrefix(lines[i+1], "+++ "), "b/")
	}
	return strings.Join(lines, "")
}

var hunkHeader = regexp.MustCompile(`^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@`)

// hunkCount is a hunk header's line count ("" means 1).
func hunkCount(s string) int {
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// checkSkill validates the SKILL.md the patch leaves.
func (p *Patch) checkSkill(dir string, opts LoadOptions) error {
	var data []byte
	for _, f := range p.Files {
		if f.Path != "SKILL.md" {
			continue
		}
		if f.Delete {
			return errkind.Errorf(ErrPatch, "the diff deletes SKILL.md; a skill needs one")
		}
		data = f.Data
	}
	if data == nil {
		return nil
	}
	doc, err := Parse(data)
	if err != nil {
		return errkind.Errorf(ErrPatch, "SKILL.md after the change: %w", err)
	}
	s, err := newSkill(doc, filepath.Base(dir), opts)
	if err != nil {
		return errkind.Errorf(ErrPatch, "SKILL.md after the change: %w", err)
	}
	if len(s.HookErrors) > 0 {
		return errkind.Errorf(ErrPatch, "SKILL.md after the change: hooks: %s", strings.Join(s.HookErrors, "; "))
	}
	return nil
}

type patchSource struct {
	data []byte
	mode fs.FileMode
}

func readForPatch(dir, rel string) (*patchSource, error) {
	f, err := OpenInRoot(dir, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPatchedResult+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPatchedResult {
		return nil, fmt.Errorf("%s: %w", rel, ErrTooLarge)
	}
	return &patchSource{data: data, mode: st.Mode().Perm()}, nil
}

// WriteTo applies the patch to the skill directory dir: the new files are
// written and fsynced in a temporary directory beside the skill (same file
// system), then each is renamed over its target, so every file is replaced
// atomically and a reader never sees half a file. Paths are resolved inside
// the skill's parent with os.Root and no component may be a symbolic link,
// so nothing is ever written through a link. A root that cannot be written
// returns ErrReadOnly before anything changed.
func (p *Patch) WriteTo(dir string) error {
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	tmp, err := os.MkdirTemp(parent, ".skillbox-patch-*")
	if err != nil {
		if errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission) {
			return errkind.Errorf(ErrReadOnly, "%s: %w", parent, err)
		}
		return err
	}
	defer os.RemoveAll(tmp)
	root, err := os.OpenRoot(parent)
	if err != nil {
		return err
	}
	defer root.Close()
	tbase := filepath.Base(tmp)
	// Check every target before anything is replaced.
	for _, f := range p.Files {
		if err := noLinks(root, base, f.Path); err != nil {
			return err
		}
	}
	for i, f := range p.Files {
		if f.Delete {
			continue
		}
		name := path.Join(tbase, strconv.Itoa(i))
		w, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.Mode)
		if err != nil {
			return err
		}
		if _, err := w.Write(f.Data); err != nil {
			w.Close()
			return err
		}
		if err := w.Chmod(f.Mode); err != nil {
			w.Close()
			return err
		}
		if err := w.Sync(); err != nil {
			w.Close()
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	for i, f := range p.Files {
		target := path.Join(base, f.Path)
		if f.Delete {
			if err := root.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing %s: %w", f.Path, err)
			}
			continue
		}
		if d := path.Dir(target); d != base {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("creating %s: %w", path.Dir(f.Path), err)
			}
		}
		if err := root.Rename(path.Join(tbase, strconv.Itoa(i)), target); err != nil {
			return fmt.Errorf("replacing %s: %w", f.Path, err)
		}
	}
	return nil
}

// noLinks refuses a target whose path inside the skill passes through, or
// ends at, a symbolic link (or anything but directories and a regular file).
func noLinks(root *os.Root, base, rel string) error {
	cur := base
	parts := strings.Split(rel, "/")
	for i, part := range append([]string{""}, parts...) {
		if part != "" {
			cur = path.Join(cur, part)
		}
		st, err := root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // the rest is created
		}
		if err != nil {
			return err
		}
		last := i == len(parts)
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			return errkind.Errorf(ErrEscape, "%s is a symbolic link; skillbox never writes through links", cur)
		case !last && !st.IsDir():
			return errkind.Errorf(ErrPatch, "%s is not a directory", cur)
		case last && !st.Mode().IsRegular():
			return errkind.Errorf(ErrPatch, "%s is not a regular file", cur)
		}
	}
	return nil
}
