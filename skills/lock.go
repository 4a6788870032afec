package skills

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// ErrNotLocked: a skill's current version is not the one its lock pins (or
// the lock does not name it).
var ErrNotLocked = errors.New("skill version not pinned by the lock")

// LockVersion is the lock file format this skillbox writes and reads.
const LockVersion = 1

// Lock pins approved skill versions: name → digest, with who approved it,
// when, and the per-file manifest of that version so a later change can be
// shown file by file. A security team approves versions, not names.
type Lock struct {
	Version int                  `json:"version"`
	Skills  map[string]LockEntry `json:"skills"`
}

// LockEntry is one pinned skill version.
type LockEntry struct {
	Digest     string          `json:"digest"`
	ApprovedBy string          `json:"approved_by"`
	ApprovedAt time.Time       `json:"approved_at"`
	Location   string          `json:"location,omitempty"`
	Files      []ManifestEntry `json:"files,omitempty"`
}

// ReadLock reads a lock file. A missing file is an empty lock wrapped in
// an error matching os.ErrNotExist, so callers choose what that means.
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return &Lock{Version: LockVersion, Skills: map[string]LockEntry{}}, fmt.Errorf("lock file %s: %w", path, err)
		}
		return nil, fmt.Errorf("lock file %s: %w", path, err)
	}
	var l Lock
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("lock file %s is not valid JSON (%v): rewrite it with 'skillbox skills lock'", path, err)
	}
	if l.Version != LockVersion {
		return nil, fmt.Errorf("lock file %s has version %d; this skillbox reads version %d", path, l.Version, LockVersion)
	}
	if l.Skills == nil {
		l.Skills = map[string]LockEntry{}
	}
	return &l, nil
}

// Pin records sk's current version as approved by approver now.
func (l *Lock) Pin(sk *Skill, approver string, now time.Time) error {
	files, err := Manifest(sk.Dir)
	if err != nil {
		return fmt.Errorf("skill %q: %w", sk.Name, err)
	}
	if l.Skills == nil {
		l.Skills = map[string]LockEntry{}
	}
	l.Version = LockVersion
	l.Skills[sk.Name] = LockEntry{Digest: sk.Digest, ApprovedBy: approver, ApprovedAt: now.UTC(), Location: sk.Location, Files: files}
	return nil
}

// Write replaces the lock file atomically (a temporary file beside it,
// fsynced, renamed over it), mode 0644.
func (l *Lock) Write(path string) error {
	l.Version = LockVersion
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lock file directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".skills.lock-*")
	if err != nil {
		return fmt.Errorf("writing lock file: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("writing lock file: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing lock file: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing lock file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Check reports whether sk's current digest is the one the lock pins. The
// error (wrapping ErrNotLocked) names both digests and the commands that
// show the change and re-approve it.
func (l *Lock) Check(sk *Skill, lockPath string) error {
	e, ok := l.Skills[sk.Name]
	if !ok {
		return errkind.Errorf(ErrNotLocked, "skill %q (%s) is not in the lock file %s; an approver pins it with 'skillbox skills lock --lock %s %s'", sk.Name, sk.Digest, lockPath, lockPath, sk.Name)
	}
	if e.Digest != sk.Digest {
		return errkind.Errorf(ErrNotLocked, "skill %q changed since it was approved: the lock %s pins %s (approved by %s), the skill is now %s; see what changed with 'skillbox skills diff --lock %s %s' and re-approve with 'skillbox skills lock --lock %s %s'", sk.Name, lockPath, e.Digest, e.ApprovedBy, sk.Digest, lockPath, sk.Name, lockPath, sk.Name)
	}
	return nil
}

// FileChange is one difference between two manifests.
type FileChange struct {
	Path string `json:"path"`
	// Change is "added", "removed" or "modified".
	Change string `json:"change"`
	Old    string `json:"old_sha256,omitempty"`
	New    string `json:"new_sha256,omitempty"`
}

// DiffManifests lists the files that differ between two versions of a
// skill, by path.
func DiffManifests(old, cur []ManifestEntry) []FileChange {
	o := map[string]ManifestEntry{}
	for _, e := range old {
		o[e.Path] = e
	}
	var out []FileChange
	seen := map[string]bool{}
	for _, e := range cur {
		seen[e.Path] = true
		prev, ok := o[e.Path]
		switch {
		case !ok:
			out = append(out, FileChange{Path: e.Path, Change: "added", New: e.SHA256})
		case prev.SHA256 != e.SHA256:
			out = append(out, FileChange{Path: e.Path, Change: "modified", Old: prev.SHA256, New: e.SHA256})
		}
	}
	for _, e := range old {
		if !seen[e.Path] {
			out = append(out, FileChange{Path: e.Path, Change: "removed", Old: e.SHA256})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
