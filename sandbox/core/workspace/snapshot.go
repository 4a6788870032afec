package workspace

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/policy/glob"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// Snapshot reads what a run is given: every path of the workspace when
// inputs is empty, else the paths inputs name. An input without glob
// characters names exactly that path: a file, a symlink, or a directory
// with everything under it (a trailing "/" says it must be a directory).
// An input with glob characters ("*", "?", "[", "\") selects every path it
// matches (see glob.Match), a matched directory with everything under it.
//
// Excluded paths (o.Excludes) are left out in both cases and counted; an
// input that names one explicitly is Refused with the pattern that
// excludes it. Refused too, by path and why: special files (never opened
// in a way that could block), files with more than one hard link (they may
// be the same file as one outside the workspace), symlinks that are
// absolute or climb out of the workspace, names a run's /work cannot hold,
// and files over Caps.FileBytes. Going over Caps.Files or Caps.Bytes is an
// error of kind errkind.LimitExceeded; an invalid input is one of kind
// errkind.InvalidParams, an input that matches nothing one of kind
// errkind.NotFound.
func (w *Workspace) Snapshot(inputs []string, o Options) (*Snapshot, error) {
	excludes, err := o.excludes()
	if err != nil {
		return nil, err
	}
	var literals, globs []string
	for _, in := range inputs {
		if err := glob.Check(in, "input"); err != nil {
			return nil, err
		}
		if glob.HasMeta(in) {
			globs = append(globs, in)
		} else {
			literals = append(literals, in)
		}
	}
	root, done, err := w.root()
	if err != nil {
		return nil, err
	}
	defer done()

	s := &snapper{
		w:        w,
		caps:     o.Caps.withDefaults(),
		excludes: glob.CompileAll(excludes),
		snap:     &Snapshot{Files: []runtime.InputFile{}, Entries: map[string]Entry{}, Refused: []api.WorkspaceFinding{}},
	}
	s.refused.list = &s.snap.Refused
	if len(inputs) == 0 {
		if err := s.walk(root, ".", true, 1); err != nil {
			return nil, err
		}
		return s.snap, nil
	}
	for _, in := range literals {
		if err := s.literal(root, in); err != nil {
			return nil, err
		}
	}
	if len(globs) > 0 {
		s.globs = glob.CompileAll(globs)
		s.hits = make([]int, len(globs))
		s.excludedHit = make([]string, len(globs))
		s.excludedUnder = make([]string, len(globs))
		if err := s.walk(root, ".", false, 1); err != nil {
			return nil, err
		}
		for i, g := range globs {
			switch {
			case s.hits[i] > 0:
			case s.excludedHit[i] != "":
				s.refuse(g, "matches only excluded paths (such as %s); excluded paths are never copied in", s.excludedHit[i])
			case s.excludedUnder[i] != "":
				return nil, errkind.Errorf(errkind.NotFound, "input %s matches nothing in the workspace outside excluded paths (%s is excluded and never searched): check the path against a listing of the workspace", runtime.QuoteName(g), s.excludedUnder[i])
			default:
				return nil, notFound(g)
			}
		}
	}
	return s.snap, nil
}

func notFound(in string) error {
	return errkind.Errorf(errkind.NotFound, "input %s matches nothing in the workspace: check the path against a listing of the workspace (paths are relative to it, such as \"docs/report.pdf\")", runtime.QuoteName(in))
}

// snapper is one Snapshot under way.
type snapper struct {
	w        *Workspace
	caps     Caps
	excludes []*glob.Pattern
	snap     *Snapshot
	refused  findingList // into snap.Refused
	bytes    int64

	globs       []*glob.Pattern
	hits        []int    // per glob, entries selected
	excludedHit []string // per glob, an excluded path it matched
	// per glob, an excluded directory it might have matched under
	excludedUnder []string
}

func (s *snapper) refuse(rel, format string, args ...any) {
	s.refused.add(rel, format, args...)
}

// excluded returns the exclude pattern rel matches, its parent
// directories tried too when ancestors. rel is matched as a directory: a
// file named like an excluded directory (".git" as a file, as in a git
// worktree) is excluded too.
func (s *snapper) excluded(rel string, ancestors bool) string {
	for _, p := range s.excludes {
		if p.Match(rel, true, ancestors) {
			return p.String()
		}
	}
	return ""
}

// literal takes the path an input names.
func (s *snapper) literal(root int, in string) error {
	rel := strings.TrimSuffix(in, "/")
	wantDir := rel != in
	if pat := s.excluded(rel, true); pat != "" {
		s.refuse(rel, "is excluded by the pattern %q of the workspace's excludes; it is never copied in", pat)
		return nil
	}
	if _, ok := s.snap.Entries[rel]; ok {
		return nil
	}
	dir, name := path.Split(rel)
	dirfd, err := openDir(root, path.Clean(dir), false, nil)
	if err != nil {
		var r *refusal
		switch {
		case errors.As(err, &r):
			s.refuse(rel, "%s", r.why)
			return nil
		case errors.Is(err, unix.ENOENT):
			return notFound(in)
		case denied(err):
			s.refuse(rel, "cannot be read: permission denied on the way to it")
			return nil
		}
		return errkind.Errorf(errkind.Unavailable, "workspace %s: %w", s.w.dir, err)
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := lstatAt(dirfd, name, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return notFound(in)
		}
		if denied(err) {
			s.refuse(rel, "cannot be read: permission denied")
			return nil
		}
		return errkind.Errorf(errkind.Unavailable, "workspace %s: lstat %s: %w", s.w.dir, rel, err)
	}
	if k := st.Mode & unix.S_IFMT; wantDir && k != unix.S_IFDIR && k != unix.S_IFLNK {
		return errkind.Errorf(errkind.InvalidParams, "input %s names a directory (it ends in \"/\") but %s is a %s", runtime.QuoteName(in), runtime.QuoteName(rel), kindName(st.Mode))
	}
	return s.take(dirfd, rel, name, &st)
}

// walk visits the entries of the directory dirfd (rel, at depth levels
// below the root). With take every entry not excluded is taken; without,
// only those a glob matches (and everything under them).
func (s *snapper) walk(dirfd int, rel string, take bool, depth int) error {
	if depth > runtime.MaxInputDepth+1 {
		return nil // nothing this deep can be a /work path (one level deeper is refused by name)
	}
	// A fresh open of "." reads the directory from its start, whoever
	// else holds dirfd, and is closed here, never by a finalizer.
	fd, err := openDirAt(dirfd, ".")
	if err != nil {
		if denied(err) && rel != "." {
			s.refuse(rel, "cannot be read: permission denied; nothing under it is copied in")
			return nil
		}
		return errkind.Errorf(errkind.Unavailable, "workspace %s: open directory %s: %w", s.w.dir, rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return errkind.Errorf(errkind.Unavailable, "workspace %s: read directory %s: %w", s.w.dir, rel, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		name := e.Name()
		child := name
		if rel != "." {
			child = rel + "/" + name
		}
		if err := s.visit(dirfd, child, name, e.Type().IsDir(), take, depth); err != nil {
			return err
		}
	}
	return nil
}

// visit handles the entry name of dirfd, rel in the workspace. isDir is
// what the directory listing says it is, good enough to match patterns
// with; what is taken is lstat'ed.
func (s *snapper) visit(dirfd int, rel, name string, isDir, take bool, depth int) error {
	// The parents of rel were checked on the way down.
	if s.excluded(rel, false) != "" {
		// Counted where it would have been taken.
		if take {
			s.snap.Excluded++
			return nil
		}
		for i, g := range s.globs {
			switch {
			case g.Match(rel, isDir, false):
				if s.excludedHit[i] == "" {
					s.excludedHit[i] = runtime.QuoteName(rel)
				}
				take = true
			case isDir && s.excludedUnder[i] == "" && g.MayMatchUnder(rel):
				s.excludedUnder[i] = runtime.QuoteName(rel)
			}
		}
		if take {
			s.snap.Excluded++
		}
		return nil
	}
	if !take {
		for i, g := range s.globs {
			if g.Match(rel, isDir, false) {
				s.hits[i]++
				take = true
			}
		}
		if !take {
			if isDir && s.mayMatchUnder(rel) {
				return s.descend(dirfd, rel, name, nil, false, depth)
			}
			return nil
		}
	}
	if _, ok := s.snap.Entries[rel]; ok {
		return nil // a literal input took it already
	}
	var st unix.Stat_t
	if err := lstatAt(dirfd, name, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed since the directory was read
		}
		if denied(err) {
			s.refuse(rel, "cannot be read: permission denied")
			return nil
		}
		return errkind.Errorf(errkind.Unavailable, "workspace %s: lstat %s: %w", s.w.dir, rel, err)
	}
	return s.take(dirfd, rel, name, &st)
}

// mayMatchUnder reports whether a glob may match something under the
// directory rel (which none matches), so a walk skips what cannot.
func (s *snapper) mayMatchUnder(rel string) bool {
	for _, g := range s.globs {
		if g.MayMatchUnder(rel) {
			return true
		}
	}
	return false
}

// descend walks the directory name of dirfd, lstat'ed as st (nil: not
// lstat'ed; O_DIRECTORY|O_NOFOLLOW is check enough).
func (s *snapper) descend(dirfd int, rel, name string, st *unix.Stat_t, take bool, depth int) error {
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			s.refuse(rel, "changed while it was read; try again")
			return nil
		}
		if denied(err) {
			s.refuse(rel, "cannot be read: permission denied; nothing under it is copied in")
			return nil
		}
		return errkind.Errorf(errkind.Unavailable, "workspace %s: open %s: %w", s.w.dir, rel, err)
	}
	if st != nil {
		var got unix.Stat_t
		if err := unix.Fstat(fd, &got); err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
			unix.Close(fd)
			s.refuse(rel, "changed while it was read; try again")
			return nil
		}
	}
	defer unix.Close(fd)
	return s.walk(fd, rel, take, depth+1)
}

// take copies the entry name of dirfd (rel in the workspace, lstat'ed as
// st) into the snapshot, a directory with everything under it.
func (s *snapper) take(dirfd int, rel, name string, st *unix.Stat_t) error {
	if err := runtime.ValidateInputName(rel); err != nil {
		s.refuse(rel, "is not a name a run's working directory can hold: %s", errkind.Detail(err, runtime.ErrInvalidJob))
		return nil
	}
	kind := st.Mode & unix.S_IFMT
	if rel == path.Base(runtime.OutputsDir) && kind != unix.S_IFDIR {
		s.refuse(rel, "is a %s, and %q in a run's working directory is reserved for its outputs folder; rename it", kindName(st.Mode), rel)
		return nil
	}
	perm := st.Mode & 0o777
	switch kind {
	case unix.S_IFDIR:
		if err := s.count(rel, 0); err != nil {
			return err
		}
		s.add(runtime.InputFile{Name: rel, Kind: runtime.InputDir, Mode: perm},
			Entry{Path: rel, Kind: runtime.InputDir, Mode: perm})
		return s.descend(dirfd, rel, name, st, true, strings.Count(rel, "/")+1)
	case unix.S_IFLNK:
		target, err := readlinkAt(dirfd, name)
		if err != nil {
			var r *refusal
			if errors.As(err, &r) {
				s.refuse(rel, "%s", r.why)
				return nil
			}
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
				s.refuse(rel, "changed while it was read; try again")
				return nil
			}
			return errkind.Errorf(errkind.Unavailable, "workspace %s: readlink %s: %w", s.w.dir, rel, err)
		}
		if why := linkOut(rel, target); why != "" {
			s.refuse(rel, "%s", why)
			return nil
		}
		if err := s.count(rel, 0); err != nil {
			return err
		}
		s.add(runtime.InputFile{Name: rel, Kind: runtime.InputSymlink, Target: target},
			Entry{Path: rel, Kind: runtime.InputSymlink, Target: target})
		return nil
	case unix.S_IFREG:
	default:
		s.refuse(rel, "is a %s; only regular files, directories and symlinks are copied in", kindName(st.Mode))
		return nil
	}
	if st.Nlink > 1 {
		s.refuse(rel, "has %d hard links and may be the same file as one outside the workspace; copy it instead of hardlinking it", st.Nlink)
		return nil
	}
	if st.Size > s.caps.FileBytes {
		s.refuse(rel, "is %d bytes, over the %d-byte cap on one file; it is not copied in", st.Size, s.caps.FileBytes)
		return nil
	}
	if err := s.count(rel, st.Size); err != nil {
		return err
	}
	f, err := openRegularAt(dirfd, name, st)
	if err != nil {
		s.bytes -= st.Size
		return s.readErr(rel, err)
	}
	data, err := readAll(f, st.Size, s.caps.FileBytes)
	f.Close()
	if err != nil {
		s.bytes -= st.Size
		return s.readErr(rel, err)
	}
	s.bytes += int64(len(data)) - st.Size // it may have changed size while read
	if s.bytes > s.caps.Bytes {
		return s.overBytes(rel)
	}
	sha := sum(data)
	s.add(runtime.InputFile{Name: rel, Kind: runtime.InputRegular, Data: data, Mode: perm},
		Entry{Path: rel, Kind: runtime.InputRegular, Size: int64(len(data)), SHA256: sha, Mode: perm})
	return nil
}

func (s *snapper) add(f runtime.InputFile, e Entry) {
	s.snap.Files = append(s.snap.Files, f)
	s.snap.Entries[e.Path] = e
}

// count checks the caps before an entry of size bytes is taken: going over
// one is an error, never a silent cut.
func (s *snapper) count(rel string, size int64) error {
	if len(s.snap.Files)+1 > s.caps.Files {
		return errkind.Errorf(errkind.LimitExceeded, "workspace %s has more than %d entries to copy in (the workspace files cap), at %s: name fewer inputs (the files and directories the run needs) or raise the cap", s.w.dir, s.caps.Files, runtime.QuoteName(rel))
	}
	s.bytes += size
	if s.bytes > s.caps.Bytes {
		return s.overBytes(rel)
	}
	return nil
}

func (s *snapper) overBytes(rel string) error {
	return errkind.Errorf(errkind.LimitExceeded, "workspace %s has more than %d bytes to copy in (the workspace bytes cap), at %s: name fewer inputs (the files the run needs) or raise the cap", s.w.dir, s.caps.Bytes, runtime.QuoteName(rel))
}

func (s *snapper) readErr(rel string, err error) error {
	var r *refusal
	switch {
	case errors.As(err, &r):
		s.refuse(rel, "%s", r.why)
	case errors.Is(err, errTooBig):
		s.refuse(rel, "grew over the %d-byte cap on one file while it was read; it is not copied in", s.caps.FileBytes)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP):
		s.refuse(rel, "changed while it was read; try again")
	case denied(err):
		s.refuse(rel, "cannot be read: permission denied")
	default:
		return errkind.Errorf(errkind.Unavailable, "workspace %s: read %s: %w", s.w.dir, rel, err)
	}
	return nil
}

// linkOut says why the symlink rel -> target may not be carried ("" if it
// may): its target must be relative and stay inside the workspace when
// resolved from the link's directory, by its text alone.
func linkOut(rel, target string) string {
	switch {
	case target == "":
		return "is a symlink with an empty target"
	case len(target) > runtime.MaxInputTargetSize:
		return fmt.Sprintf("is a symlink whose target is %d bytes, at most %d", len(target), runtime.MaxInputTargetSize)
	case strings.IndexByte(target, 0) >= 0:
		return "is a symlink whose target contains a NUL byte"
	case path.IsAbs(target):
		return fmt.Sprintf("is a symlink to the absolute path %s; only symlinks to paths inside the workspace (relative ones) are copied in", runtime.QuoteName(target))
	}
	if to := path.Join(path.Dir(rel), target); to == ".." || strings.HasPrefix(to, "../") {
		return fmt.Sprintf("is a symlink to %s, which is outside the workspace; only symlinks to paths inside it are copied in", runtime.QuoteName(target))
	}
	return ""
}

func denied(err error) bool { return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) }
