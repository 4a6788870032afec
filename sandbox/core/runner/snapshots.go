package runner

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/skills"
)

// SkillPinner yields the directory a run mounts at /skill for one skill
// version. The directory must hold exactly the version's digest and be out
// of reach of whoever can write the skill's own directory: otherwise the
// script that runs could differ from the one that was hashed, audited and
// approved (the live directory can change between the check and the exec).
type SkillPinner interface {
	Pin(sk *skills.Skill) (string, error)
}

// ErrSkillChanged: the skill's files on disk no longer have the digest it
// was indexed (and loaded, and approved) with.
var ErrSkillChanged = errors.New("skill changed on disk")

// DefaultSnapshotDir holds the copies of skill versions runs mount, beside
// the runtimes' run dirs.
const DefaultSnapshotDir = "/run/skillbox/snapshots"

// snapshotDirMode is the mode of SnapshotStore.Dir: root's alone, like the
// run dirs. The runtimes bind-mount a copy as root on the host (runc, in a
// user namespace, opens its bind mount sources before it enters it), so
// no other uid needs to walk in.
const snapshotDirMode = 0o700

// DefaultSnapshotMaxBytes bounds the regular files of one skill version.
const DefaultSnapshotMaxBytes = 128 << 20

// SnapshotStore keeps one root-owned copy per skill digest, made on first
// use and reused by every later run of that version, so the copy costs one
// stat on the hot path. Files keep their author's modes (skills.Snapshot):
// a template a script copies into /work stays editable there, executables
// stay executable. What keeps the copy unchanged is not its modes: runs
// mount it read-only, the sandbox's uid is not its owner, and its parent
// (Dir) is root's alone.
//
// Copies are private to the daemon: the directory is 0700, and, should it
// ever be opened up, a copy's name is an HMAC of its digest under a key
// only root can read (Dir/.key), so knowing a skill's digest does not give
// a local user a path into its copy.
type SnapshotStore struct {
	Dir      string
	MaxBytes int64

	keyMu sync.Mutex
	key   []byte
}

// snapshotKeyFile holds the key that names copies.
const snapshotKeyFile = ".key"

// snapshotFormat enters every copy's name: a copy made by a skillbox that
// copied differently (the write bits stripped, before format 2) is not
// reused; Prune removes it once unused.
const snapshotFormat = "2:"

// name is the directory name of the copy of digest (hex, no prefix).
func (s *SnapshotStore) name(hexDigest string) (string, error) {
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	if s.key == nil {
		if err := makeSnapshotDir(s.Dir); err != nil {
			return "", err
		}
		p := filepath.Join(s.Dir, snapshotKeyFile)
		k, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) || (err == nil && len(k) != 32) {
			k = make([]byte, 32)
			if _, err := rand.Read(k); err != nil {
				return "", err
			}
			tmp := p + ".tmp"
			if err := os.WriteFile(tmp, k, 0o600); err != nil {
				return "", err
			}
			if err := os.Rename(tmp, p); err != nil {
				return "", err
			}
		} else if err != nil {
			return "", err
		}
		s.key = k
	}
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(snapshotFormat + hexDigest))
	return "v-" + hex.EncodeToString(m.Sum(nil))[:48], nil
}

// Lookup returns the copy of the skill version with this digest
// ("sha256:<hex>") if one has been made.
func (s *SnapshotStore) Lookup(digest string) (string, bool) {
	hexDigest, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexDigest) != 64 {
		return "", false
	}
	n, err := s.name(hexDigest)
	if err != nil {
		return "", false
	}
	p := filepath.Join(s.Dir, n)
	if st, err := os.Lstat(p); err == nil && st.IsDir() {
		return p, true
	}
	return "", false
}

var _ SkillPinner = (*SnapshotStore)(nil)

// Pin implements SkillPinner.
func (s *SnapshotStore) Pin(sk *skills.Skill) (string, error) {
	hexDigest, ok := strings.CutPrefix(sk.Digest, "sha256:")
	if !ok || len(hexDigest) != 64 || strings.ContainsAny(hexDigest, "/.") {
		return "", errkind.Errorf(errkind.Internal, "skill %q has no usable digest (%q)", sk.Name, sk.Digest)
	}
	name, err := s.name(hexDigest)
	if err != nil {
		return "", errkind.Errorf(errkind.Unavailable, "skill snapshots: %w", err)
	}
	final := filepath.Join(s.Dir, name)
	if st, err := os.Lstat(final); err == nil && st.IsDir() {
		now := time.Now()
		_ = os.Chtimes(final, now, now) // last use, for Prune
		return final, nil
	}
	if err := makeSnapshotDir(s.Dir); err != nil {
		return "", errkind.Errorf(errkind.Unavailable, "skill snapshots: %w", err)
	}
	tmp, err := os.MkdirTemp(s.Dir, ".tmp-")
	if err != nil {
		return "", errkind.Errorf(errkind.Unavailable, "skill snapshots: %w", err)
	}
	maxBytes := s.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultSnapshotMaxBytes
	}
	got, err := skills.Snapshot(sk.Dir, tmp, maxBytes)
	if err != nil {
		removeAll(tmp)
		if errors.Is(err, skills.ErrTooLarge) {
			return "", errkind.Errorf(errkind.InvalidParams, "skill %q: %w", sk.Name, err)
		}
		return "", errkind.Errorf(errkind.Unavailable, "copying skill %q for the run: %w", sk.Name, err)
	}
	if got != sk.Digest {
		removeAll(tmp)
		return "", errkind.Wrap(errkind.InvalidParams, errkind.Errorf(ErrSkillChanged, "skill %q is now %s on disk, not the %s it was indexed with: wait for the index to catch up, then load it again", sk.Name, got, sk.Digest))
	}
	if err := os.Rename(tmp, final); err != nil {
		removeAll(tmp)
		// Another run made the same version meanwhile: use that one.
		if st, serr := os.Lstat(final); serr == nil && st.IsDir() {
			return final, nil
		}
		return "", errkind.Errorf(errkind.Unavailable, "skill snapshots: %w", err)
	}
	return final, nil
}

// makeSnapshotDir makes dir with snapshotDirMode (its missing parents
// 0711: /run/skillbox is also the socket's directory) and closes one an
// older skillbox made 0711.
func makeSnapshotDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, snapshotDirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st.Mode().Perm() != snapshotDirMode {
		return os.Chmod(dir, snapshotDirMode)
	}
	return nil
}

// Prune removes copies not used for maxAge (and half-made ones), so old
// skill versions do not pile up. A copy a run still mounts is only ever
// older than maxAge if the run is, so pick maxAge above the longest timeout.
func (s *SnapshotStore) Prune(maxAge time.Duration) (int, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		if e.Name() == snapshotKeyFile {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < maxAge {
			continue
		}
		if err := removeAll(filepath.Join(s.Dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// removeAll removes a copy, whose directories may lack write bits.
func removeAll(dir string) error {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
