package workspace

import (
	"errors"
	"path"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/policy/glob"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// Apply applies c to the workspace against base, the Snapshot the run
// started from. Deletions come first (a run may replace a file by a
// directory of that name), then writes, each path on its own:
//
//   - A path that was in base is replaced only while the host's copy is
//     still base's (same kind, same SHA-256 or link target), else it is a
//     Conflict and nothing is written. The new content is written to a
//     temporary file beside it and exchanged with it atomically
//     (renameat2 RENAME_EXCHANGE); what the exchange took out is checked
//     again, and if a host writer changed it meanwhile the exchange is
//     undone and the path is a Conflict. The file keeps its mode bits
//     (and owner, where the writer may keep it). A host program that
//     still holds the old file open after that writes to the old copy,
//     which is gone from the workspace: no check can see that write.
//     Without renameat2's flags (some file systems) the check is made
//     again just before a plain rename, and a host write between the two
//     is the one not seen.
//   - A path that was not in base is created (mode 0644, owned by
//     o.Owner when set) only where nothing is (RENAME_NOREPLACE); if
//     something is there already it is a Conflict, unless it holds the
//     very same content (then nothing is reported). Missing parent
//     directories are made, 0755, one at a time without following links.
//   - A path under a symlink or a non-directory on the host, an excluded
//     path, or a file over o.Caps.FileBytes is Refused.
//   - With o.Quota, what the workspace holds is counted once (a walk, as
//     Usage) at the start, deletions take from it and writes add their
//     growth; a file whose growth would take it over the quota is
//     Refused, naming the quota, and the others are applied still, in
//     path order.
//   - A deletion is applied only with allowDelete, only to a path that
//     was in base and is still base's on the host (else Conflict); a
//     symlink is removed, not followed; a directory is never deleted.
//
// A path both deleted and written is written. A nil base is an empty one.
// Apply returns an error only when the workspace itself cannot be used
// (closed, removed, an invalid exclude pattern), with the Report of what
// was done before; every problem with one path is a api.WorkspaceFinding.
func (w *Workspace) Apply(base *Snapshot, c Changes, allowDelete bool, o Options) (*Report, error) {
	excludes, err := o.excludes()
	if err != nil {
		return nil, err
	}
	if o.Quota > 0 || o.Account != nil {
		w.quotaMu.Lock()
		defer w.quotaMu.Unlock()
	}
	root, done, err := w.root()
	if err != nil {
		return nil, err
	}
	defer done()
	a := &applier{
		w:        w,
		root:     root,
		caps:     o.Caps.withDefaults(),
		owner:    o.Owner,
		excludes: glob.CompileAll(excludes),
		rep:      &Report{Written: []api.WorkspaceChange{}, Deleted: []api.WorkspaceChange{}, Conflicts: []api.WorkspaceFinding{}, Refused: []api.WorkspaceFinding{}},
		seen:     map[string]bool{},
	}
	a.refused.list, a.conflicts.list = &a.rep.Refused, &a.rep.Conflicts
	if base != nil {
		a.base = base.Entries
	}
	if o.Quota > 0 || o.Account != nil {
		a.quota, a.account = o.Quota, o.Account
		var gen uint64
		if a.account != nil {
			gen = a.account.Gen()
		}
		if a.used, _, err = w.walkUsage(root); err != nil {
			return nil, err
		}
		if a.account != nil {
			// What the budget counts for the workspace is what is there.
			a.account.Sync(gen, a.used)
		}
	}
	// What Apply changes is not counted exactly (the directories it
	// makes, a previous copy it could not remove): the count is dropped.
	chg := &treeChange{w: w}
	chg.begin()
	defer chg.end()

	writes := make(map[string]bool, len(c.Written))
	for i := range c.Written {
		writes[c.Written[i].Path] = true
	}
	deleted := append([]string(nil), c.Deleted...)
	sort.Strings(deleted)
	for _, rel := range deleted {
		if writes[rel] {
			continue // written again: the write replaces it
		}
		if err := a.delete(rel, allowDelete); err != nil {
			return a.rep, err
		}
	}
	written := make([]int, len(c.Written))
	for i := range written {
		written[i] = i
	}
	sort.SliceStable(written, func(i, j int) bool { return c.Written[written[i]].Path < c.Written[written[j]].Path })
	for _, i := range written {
		if err := a.write(&c.Written[i]); err != nil {
			return a.rep, err
		}
	}
	return a.rep, nil
}

// applier is one Apply under way.
type applier struct {
	w        *Workspace
	root     int
	caps     Caps
	owner    *Owner
	excludes []*glob.Pattern
	base     map[string]Entry
	rep      *Report
	// refused and conflicts add to rep's Refused and Conflicts.
	refused, conflicts findingList
	seen               map[string]bool
	// quota (0: none) and used, what the workspace holds as Apply goes.
	quota, used int64
	// account is the workspace's part of a Budget (nil: none).
	account *Account
}

func (a *applier) refuse(rel, format string, args ...any) {
	a.refused.add(rel, format, args...)
}

func (a *applier) conflict(rel, format string, args ...any) {
	a.conflicts.add(rel, format, args...)
}

// check refuses what no change may touch: a name /work cannot hold, a
// path given twice, an excluded path. It reports whether rel may go on.
func (a *applier) check(rel, verb string) bool {
	if err := runtime.ValidateInputName(rel); err != nil {
		a.refuse(rel, "is not a valid workspace path: %s; not %s", errkind.Detail(err, runtime.ErrInvalidJob), verb)
		return false
	}
	if a.seen[rel] {
		a.refuse(rel, "is changed twice by the run; not %s again", verb)
		return false
	}
	a.seen[rel] = true
	for _, p := range a.excludes {
		if p.Match(rel, true, true) {
			a.refuse(rel, "is excluded by the pattern %q of the workspace's excludes; not %s", p.String(), verb)
			return false
		}
	}
	return true
}

// parent opens rel's directory (making it with create). When it cannot,
// ok is false and either a api.WorkspaceFinding is recorded, or missing says the
// directory is not there (without create), or err says the workspace is
// unusable.
func (a *applier) parent(rel, verb string, create bool) (fd int, ok, missing bool, err error) {
	fd, err = openDir(a.root, path.Dir(rel), create, a.owner)
	if err == nil {
		return fd, true, false, nil
	}
	var r *refusal
	switch {
	case errors.As(err, &r):
		a.refuse(rel, "%s; not %s", r.why, verb)
		return -1, false, false, nil
	case errors.Is(err, unix.ENOENT):
		return -1, false, true, nil
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS), errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		a.refuse(rel, "its directory cannot be opened or made: %v; not %s", err, verb)
		return -1, false, false, nil
	}
	return -1, false, false, errkind.Errorf(errkind.Unavailable, "workspace %s: %w", a.w.dir, err)
}

// same reports whether the entry name of dirfd is still e, base's entry:
// the same kind, and the same content or link target. It never follows a
// link and never reads a special or hard-linked file.
func same(dirfd int, name string, e Entry) (bool, error) {
	var st unix.Stat_t
	if err := lstatAt(dirfd, name, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	switch e.Kind {
	case runtime.InputDir:
		return st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
	case runtime.InputSymlink:
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return false, nil
		}
		target, err := readlinkAt(dirfd, name)
		if err != nil {
			return false, nil
		}
		return target == e.Target, nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Size != e.Size {
		return false, nil
	}
	h, err := hashRegularAt(dirfd, name, &st)
	if err != nil {
		var r *refusal
		if errors.As(err, &r) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
			return false, nil
		}
		return false, err
	}
	return h == e.SHA256, nil
}

func (a *applier) write(f *runtime.OutputFile) error {
	rel := f.Path
	if !a.check(rel, "written") {
		return nil
	}
	if int64(len(f.Data)) > a.caps.FileBytes {
		a.refuse(rel, "is %d bytes, over the %d-byte cap on one file; not written", len(f.Data), a.caps.FileBytes)
		return nil
	}
	after := sum(f.Data)
	if f.SHA256 != "" && f.SHA256 != after {
		a.refuse(rel, "its data does not match its SHA-256 (%s); not written", f.SHA256)
		return nil
	}
	be, inBase := a.base[rel]
	if inBase && be.Kind == runtime.InputDir {
		a.refuse(rel, "was a directory when the run started; a directory is not replaced by a file; not written")
		return nil
	}
	// What the file adds: a replaced file was base's, or it is a conflict.
	growth := int64(len(f.Data))
	if inBase && be.Kind == runtime.InputRegular {
		growth -= be.Size
	}
	if why := overQuota(a.quota, a.used, growth); why != "" {
		a.refuse(rel, "is %d bytes and %s; not written", len(f.Data), why)
		return nil
	}
	var res *Reservation
	if a.account != nil {
		r, err := a.account.Reserve(growth)
		if errors.Is(err, errkind.LimitExceeded) {
			a.refuse(rel, "is %d bytes and %s; not written", len(f.Data), errkind.Detail(err, errkind.LimitExceeded))
			return nil
		}
		if err != nil {
			return err
		}
		res = r
	}
	if n := len(a.rep.Written); a.quota > 0 || res != nil {
		defer func() {
			if len(a.rep.Written) > n {
				a.used += growth
				res.Done(growth)
			} else {
				res.Done(0)
			}
		}()
	}
	dirfd, ok, missing, err := a.parent(rel, "written", !inBase)
	if !ok {
		if missing {
			a.conflict(rel, "its directory was removed on the host since the run started; the run's version is not written")
		}
		return err
	}
	defer unix.Close(dirfd)
	name := path.Base(rel)
	if inBase {
		return a.replace(dirfd, rel, name, be, f.Data, after)
	}
	return a.create(dirfd, rel, name, f.Data, after)
}

// replace puts data at name, which was base's entry be, if it still is.
func (a *applier) replace(dirfd int, rel, name string, be Entry, data []byte, after string) error {
	var st unix.Stat_t
	if err := lstatAt(dirfd, name, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			a.conflict(rel, "was deleted on the host since the run started; the run's version is not written")
			return nil
		}
		return a.writeErr(rel, err)
	}
	ok, err := same(dirfd, name, be)
	if err != nil {
		return a.writeErr(rel, err)
	}
	if !ok {
		a.conflict(rel, "changed on the host since the run started; the host copy is kept and the run's version is not written")
		return nil
	}
	if be.Kind == runtime.InputRegular && be.SHA256 == after {
		return nil // the run left it as it was
	}
	perm, uid, gid := uint32(0o644), -1, -1
	if be.Kind == runtime.InputRegular {
		perm, uid, gid = st.Mode&0o777, int(st.Uid), int(st.Gid)
	} else if a.owner != nil {
		uid, gid = a.owner.UID, a.owner.GID
	}
	tmp, err := writeTemp(dirfd, data, perm, uid, gid, be.Kind == runtime.InputRegular)
	if err != nil {
		return a.writeErr(rel, err)
	}
	if a.w.raced != nil {
		a.w.raced(rel)
	}
	err = a.renameat2(dirfd, tmp, name, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// No exchange on this file system: check once more and rename
		// over it. A host write between the two is the one not seen.
		if ok, err := same(dirfd, name, be); err != nil || !ok {
			unix.Unlinkat(dirfd, tmp, 0)
			a.conflict(rel, "changed on the host while it was written back; the host copy is kept and the run's version is not written")
			return nil
		}
		if err := renameat(dirfd, tmp, name); err != nil {
			unix.Unlinkat(dirfd, tmp, 0)
			return a.writeErr(rel, err)
		}
		a.written(dirfd, rel, be, after, len(data))
		return nil
	}
	if err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		if errors.Is(err, unix.ENOENT) {
			a.conflict(rel, "was deleted on the host while it was written back; the run's version is not written")
			return nil
		}
		return a.writeErr(rel, err)
	}
	// tmp now holds what was at name: it must be base's still, or a host
	// writer got in between the check and the exchange.
	if ok, err := same(dirfd, tmp, be); err != nil || !ok {
		if xerr := a.renameat2(dirfd, tmp, name, unix.RENAME_EXCHANGE); xerr != nil {
			a.conflict(rel, "changed on the host while it was written back, and putting the host copy back failed (%v): the host copy is at %s", xerr, path.Join(path.Dir(rel), tmp))
			return nil
		}
		unix.Unlinkat(dirfd, tmp, 0)
		a.conflict(rel, "changed on the host while it was written back; the host copy is kept and the run's version is not written")
		return nil
	}
	if err := unlinkAny(dirfd, tmp); err != nil {
		a.refuse(rel, "written, but the previous copy could not be removed from %s: %v", path.Join(path.Dir(rel), tmp), err)
	}
	a.written(dirfd, rel, be, after, len(data))
	return nil
}

func (a *applier) written(dirfd int, rel string, be Entry, after string, size int) {
	unix.Fsync(dirfd)
	a.rep.Written = append(a.rep.Written, api.WorkspaceChange{Path: rel, Before: be.SHA256, After: after, Size: int64(size)})
}

// create puts data at name, where nothing was when the run started, if
// nothing is there still.
func (a *applier) create(dirfd int, rel, name string, data []byte, after string) error {
	uid, gid := -1, -1
	if a.owner != nil {
		uid, gid = a.owner.UID, a.owner.GID
	}
	var st unix.Stat_t
	err := lstatAt(dirfd, name, &st)
	if err == nil {
		return a.exists(dirfd, rel, name, &st, after)
	}
	if !errors.Is(err, unix.ENOENT) {
		return a.writeErr(rel, err)
	}
	tmp, err := writeTemp(dirfd, data, 0o644, uid, gid, false)
	if err != nil {
		return a.writeErr(rel, err)
	}
	if a.w.raced != nil {
		a.w.raced(rel)
	}
	err = a.renameat2(dirfd, tmp, name, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// No RENAME_NOREPLACE here: a hard link is just as exclusive.
		err = linkat(dirfd, tmp, name)
		unix.Unlinkat(dirfd, tmp, 0)
	}
	if err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		if errors.Is(err, unix.EEXIST) {
			if err := lstatAt(dirfd, name, &st); err == nil {
				return a.exists(dirfd, rel, name, &st, after)
			}
			a.conflict(rel, "was created on the host while it was written back; the host copy is kept and the run's version is not written")
			return nil
		}
		return a.writeErr(rel, err)
	}
	a.written(dirfd, rel, Entry{}, after, len(data))
	return nil
}

// exists handles a new file of the run's where the host has something.
func (a *applier) exists(dirfd int, rel, name string, st *unix.Stat_t, after string) error {
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 {
		h, err := hashRegularAt(dirfd, name, st)
		if err == nil && h == after {
			return nil // the host has the run's content already
		}
	}
	what := "a " + kindName(st.Mode)
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		what = "a file"
	}
	a.conflict(rel, "the host has %s there that the run was not given (made since the run started, or not among its inputs); the host copy is kept and the run's version is not written", what)
	return nil
}

func (a *applier) delete(rel string, allow bool) error {
	if !a.check(rel, "deleted") {
		return nil
	}
	if !allow {
		a.refuse(rel, "deleting is not allowed by policy (the workspace is not writable with deletions); the host copy is kept")
		return nil
	}
	be, ok := a.base[rel]
	switch {
	case !ok:
		a.refuse(rel, "was not given to the run; not deleted")
		return nil
	case be.Kind == runtime.InputDir:
		a.refuse(rel, "is a directory; directories are not deleted (remove it on the host if it should go)")
		return nil
	}
	dirfd, ok, _, err := a.parent(rel, "deleted", false)
	if !ok {
		return err // refused, or gone on the host too
	}
	defer unix.Close(dirfd)
	name := path.Base(rel)
	var st unix.Stat_t
	if err := lstatAt(dirfd, name, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // deleted on the host too
		}
		return a.writeErr(rel, err)
	}
	if ok, err := same(dirfd, name, be); err != nil {
		return a.writeErr(rel, err)
	} else if !ok {
		a.conflict(rel, "changed on the host since the run started; the host copy is kept, not deleted")
		return nil
	}
	if a.w.raced != nil {
		a.w.raced(rel)
	}
	// Move it aside, check what was moved, then remove it: a host change
	// in between is put back, never lost.
	tmp := tempName()
	if err := a.renameat2(dirfd, name, tmp, unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			err = renameat(dirfd, name, tmp) // tmp is a fresh random name
		}
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return a.writeErr(rel, err)
		}
	}
	if ok, err := same(dirfd, tmp, be); err != nil || !ok {
		err := a.renameat2(dirfd, tmp, name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			if err = linkat(dirfd, tmp, name); err == nil {
				unix.Unlinkat(dirfd, tmp, 0)
			}
		}
		if err != nil {
			a.conflict(rel, "changed on the host while it was deleted; the host copy is kept at %s", path.Join(path.Dir(rel), tmp))
			return nil
		}
		a.conflict(rel, "changed on the host while it was deleted; the host copy is kept, not deleted")
		return nil
	}
	if err := unlinkAny(dirfd, tmp); err != nil {
		return a.writeErr(rel, err)
	}
	unix.Fsync(dirfd)
	a.rep.Deleted = append(a.rep.Deleted, api.WorkspaceChange{Path: rel, Before: be.SHA256})
	if be.Kind == runtime.InputRegular {
		a.used -= be.Size
		if a.account != nil {
			a.account.Add(-be.Size)
		}
	}
	return nil
}

// writeErr turns a system error on rel into a api.WorkspaceFinding where the path is
// at fault (permissions, space, a kind of file) and an error where the
// workspace is.
func (a *applier) writeErr(rel string, err error) error {
	var r *refusal
	switch {
	case errors.As(err, &r):
		a.refuse(rel, "%s", r.why)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS),
		errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG),
		errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR),
		errors.Is(err, unix.ELOOP), errors.Is(err, unix.EBUSY), errors.Is(err, unix.EMLINK),
		errors.Is(err, unix.ETXTBSY), errors.Is(err, unix.EOPNOTSUPP):
		a.refuse(rel, "cannot be changed on the host: %v", err)
	default:
		return errkind.Errorf(errkind.Unavailable, "workspace %s: %s: %w", a.w.dir, rel, err)
	}
	return nil
}

// writeTemp writes data to a new temporary file of dirfd, fsynced, with
// mode perm and, when uid >= 0, that owner (a failure to give it the
// owner is ignored when keep says it only keeps the owner of the file it
// replaces, as a writer that is not root cannot). It returns its name.
func writeTemp(dirfd int, data []byte, perm uint32, uid, gid int, keep bool) (string, error) {
	var (
		name string
		fd   int
		err  error
	)
	for range 8 {
		name = tempName()
		fd, err = retry(func() (int, error) {
			return unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		})
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		unix.Close(fd)
		unix.Unlinkat(dirfd, name, 0)
		return "", err
	}
	for b := data; len(b) > 0; {
		n, err := retry(func() (int, error) { return unix.Write(fd, b) })
		if err != nil {
			return fail(err)
		}
		b = b[n:]
	}
	if uid >= 0 {
		if err := unix.Fchown(fd, uid, gid); err != nil && !keep {
			return fail(err)
		}
	}
	if err := unix.Fchmod(fd, perm); err != nil {
		return fail(err)
	}
	if err := unix.Fsync(fd); err != nil {
		return fail(err)
	}
	if err := unix.Close(fd); err != nil {
		unix.Unlinkat(dirfd, name, 0)
		return "", err
	}
	return name, nil
}

func (a *applier) renameat2(dirfd int, from, to string, flags uint) error {
	if a.w.noRenameat2 {
		return unix.EINVAL
	}
	return renameat2(dirfd, from, to, flags)
}

func renameat2(dirfd int, from, to string, flags uint) error {
	_, err := retry(func() (int, error) { return 0, unix.Renameat2(dirfd, from, dirfd, to, flags) })
	return err
}

func renameat(dirfd int, from, to string) error {
	_, err := retry(func() (int, error) { return 0, unix.Renameat(dirfd, from, dirfd, to) })
	return err
}

func linkat(dirfd int, from, to string) error {
	_, err := retry(func() (int, error) { return 0, unix.Linkat(dirfd, from, dirfd, to, 0) })
	return err
}

// unlinkAny removes name of dirfd, a file or a symlink (never followed).
func unlinkAny(dirfd int, name string) error {
	_, err := retry(func() (int, error) { return 0, unix.Unlinkat(dirfd, name, 0) })
	return err
}
