package skills

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// An approver asked to confirm a run of a pinned skill should see what
// changed since the version that was approved, not only that the digest
// differs. A lock keeps hashes; to show the lines, the bytes of every
// pinned file are kept too, in a content store beside the lock named by
// each file's SHA-256 (so versions share unchanged files and a read is
// verified by its name). CompareWithLock is the one rule that turns a lock,
// that store and a skill's current files into what a confirmation shows.

// Bounds of what is kept and shown.
const (
	// MaxKeptFileBytes: larger files of a pinned version are not kept
	// (their changes are shown by hash).
	MaxKeptFileBytes = 1 << 20
	// MaxLockDiffBytes caps the unified diff of one comparison.
	MaxLockDiffBytes = 64 << 10
	// MaxLockDiffFiles caps how many changed files are diffed.
	MaxLockDiffFiles = 20
)

// LockContentDir is the content store of the lock file lockPath.
func LockContentDir(lockPath string) string { return lockPath + ".content" }

// LockStatus says how a skill's current version stands with its lock.
type LockStatus string

// The statuses, worded as an approver reads them.
const (
	LockNone    LockStatus = "no lock"
	LockMatches LockStatus = "matches the lock"
	LockDiffers LockStatus = "differs from the lock"
)

// NoteHashesOnly is said of a changed file whose locked bytes are not kept.
const NoteHashesOnly = "locked content not kept: hashes only"

// LockComparison is a skill's current version against the one its lock
// pins: the file-level changes and, where both contents are text and at
// hand, a unified diff (the script first). Notes say what is not shown and
// why; nothing is left out silently.
type LockComparison struct {
	Status        LockStatus
	LockFile      string
	CurrentDigest string
	Locked        *LockEntry
	Changes       []FileChange
	Diff          string
	Notes         []string
}

// KeepLockedFiles copies the files of a pinned version (files, as the lock
// lists them, read from the skill directory dir) into the content store
// store. A file whose bytes no longer hash as listed (changed since it was
// pinned), or larger than MaxKeptFileBytes, is not kept; a later
// comparison then says so.
func KeepLockedFiles(store, dir string, files []ManifestEntry) error {
	if err := os.MkdirAll(store, 0o700); err != nil {
		return fmt.Errorf("lock content store: %w", err)
	}
	var errs []error
	for _, e := range files {
		if e.Size > MaxKeptFileBytes || !validSHA256(e.SHA256) {
			continue
		}
		dst := filepath.Join(store, e.SHA256)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		data, err := readAtMost(dir, e.Path, MaxKeptFileBytes)
		if err != nil || sha256Hex(data) != e.SHA256 {
			continue
		}
		if err := writeBlob(store, dst, data); err != nil {
			errs = append(errs, fmt.Errorf("keeping %s: %w", e.Path, err))
		}
	}
	return errors.Join(errs...)
}

// PruneContent removes from store the files no entry of l names.
func (l *Lock) PruneContent(store string) error {
	keep := map[string]bool{}
	for _, e := range l.Skills {
		for _, f := range e.Files {
			keep[f.SHA256] = true
		}
	}
	entries, err := os.ReadDir(store)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lock content store: %w", err)
	}
	var errs []error
	for _, d := range entries {
		if !keep[d.Name()] {
			if err := os.Remove(filepath.Join(store, d.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// LockedFiles finds the bytes of a file of a pinned version by its path
// and SHA-256; the bytes are returned only if they have that hash.
type LockedFiles interface {
	LockedFile(path, sha256 string) ([]byte, bool)
}

// ContentStore is a lock's content store (LockContentDir), written by
// KeepLockedFiles: files named by their SHA-256.
type ContentStore string

var _ LockedFiles = ContentStore("")

// LockedFile implements LockedFiles.
func (c ContentStore) LockedFile(_, sum string) ([]byte, bool) {
	// The name is the lock's hash, checked before it names a file.
	if !validSHA256(sum) {
		return nil, false
	}
	b, err := readAtMost(string(c), sum, MaxKeptFileBytes)
	return b, err == nil && sha256Hex(b) == sum
}

// VersionDir is a directory holding a whole pinned version, such as the
// copy of it a run mounted (a snapshot made for its digest).
type VersionDir string

var _ LockedFiles = VersionDir("")

// LockedFile implements LockedFiles.
func (d VersionDir) LockedFile(path, sum string) ([]byte, bool) {
	b, err := readAtMost(string(d), path, MaxKeptFileBytes)
	return b, err == nil && sha256Hex(b) == sum
}

func lockedFile(sources []LockedFiles, path, sum string) ([]byte, bool) {
	for _, s := range sources {
		if s == nil {
			continue
		}
		if b, ok := s.LockedFile(path, sum); ok {
			return b, true
		}
	}
	return nil, false
}

// CompareWithLock compares sk as it is now with the version l pins
// (l nil or not naming sk: LockNone). script is the file the run
// executes, diffed first; sources are where the pinned files' bytes may
// be found, in order (the lock's ContentStore first).
func CompareWithLock(l *Lock, lockFile string, sk *Skill, script string, sources ...LockedFiles) (*LockComparison, error) {
	c := &LockComparison{Status: LockNone, LockFile: lockFile, CurrentDigest: sk.Digest}
	if l == nil {
		return c, nil
	}
	e, ok := l.Skills[sk.Name]
	if !ok {
		return c, nil
	}
	c.Locked = &e
	if e.Digest == sk.Digest {
		c.Status = LockMatches
		return c, nil
	}
	c.Status = LockDiffers
	cur, err := Manifest(sk.Dir)
	if err != nil {
		return nil, fmt.Errorf("skill %q: %w", sk.Name, err)
	}
	c.Changes = DiffManifests(e.Files, cur)
	if len(c.Changes) == 0 {
		c.Notes = append(c.Notes, "the files' contents are the same; modes, links or empty directories changed")
		return c, nil
	}
	order := slices.Clone(c.Changes)
	slices.SortStableFunc(order, func(a, b FileChange) int {
		switch {
		case a.Path == script && b.Path != script:
			return -1
		case b.Path == script && a.Path != script:
			return 1
		}
		return 0
	})
	var diff strings.Builder
	total, shown := 0, 0
	for i, ch := range order {
		if i == MaxLockDiffFiles {
			c.Notes = append(c.Notes, fmt.Sprintf("%d more changed files not diffed (at most %d are)", len(order)-i, MaxLockDiffFiles))
			break
		}
		text, note := fileDiff(sk.Dir, sources, ch)
		if note != "" {
			c.Notes = append(c.Notes, ch.Path+": "+note)
			continue
		}
		total += len(text)
		if room := MaxLockDiffBytes - diff.Len(); len(text) > room {
			diff.WriteString(cutAtLine(text, room))
			continue
		}
		diff.WriteString(text)
		shown += len(text)
	}
	if total > shown {
		c.Notes = append(c.Notes, fmt.Sprintf("diff capped: %d of %d bytes shown", diff.Len(), total))
	}
	c.Diff = diff.String()
	return c, nil
}

// fileDiff is the unified diff of one change, or why there is none.
func fileDiff(dir string, sources []LockedFiles, ch FileChange) (string, string) {
	var old, cur []byte
	if ch.Old != "" {
		b, ok := lockedFile(sources, ch.Path, ch.Old)
		if !ok {
			return "", fmt.Sprintf("%s (locked sha256:%s, now %s)", NoteHashesOnly, ch.Old, orNone(ch.New))
		}
		old = b
	}
	if ch.New != "" {
		b, err := readAtMost(dir, ch.Path, MaxKeptFileBytes)
		switch {
		case errors.Is(err, errTooBig):
			return "", fmt.Sprintf("more than %d bytes, not diffed (locked sha256:%s, now sha256:%s)", MaxKeptFileBytes, orNone(ch.Old), ch.New)
		case err != nil || sha256Hex(b) != ch.New:
			return "", "changed on disk while being compared; compare again"
		}
		cur = b
	}
	if !isText(old) || !isText(cur) {
		return "", fmt.Sprintf("not text, not diffed (locked sha256:%s, now sha256:%s)", orNone(ch.Old), orNone(ch.New))
	}
	from, to := "a/"+ch.Path, "b/"+ch.Path
	if ch.Old == "" {
		from = "/dev/null"
	}
	if ch.New == "" {
		to = "/dev/null"
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(old)), B: difflib.SplitLines(string(cur)),
		FromFile: from, ToFile: to, Context: 3,
	})
	if err != nil {
		return "", fmt.Sprintf("not diffed: %v", err)
	}
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text, ""
}

func orNone(sha string) string {
	if sha == "" {
		return "none"
	}
	return sha
}

// cutAtLine returns the longest prefix of s up to n bytes ending at a line.
func cutAtLine(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) > n {
		s = s[:n]
	}
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[:i+1]
	}
	return ""
}

var errTooBig = errors.New("file too large")

// readAtMost reads rel inside root (confined, OpenInRoot) if it has at
// most limit bytes.
func readAtMost(root, rel string, limit int64) ([]byte, error) {
	f, err := OpenInRoot(root, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errTooBig
	}
	return b, nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && s == strings.ToLower(s)
}

// writeBlob writes data as dst through a temporary file in store.
func writeBlob(store, dst string, data []byte) error {
	f, err := os.CreateTemp(store, ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, bytes.NewReader(data)); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), dst)
}
