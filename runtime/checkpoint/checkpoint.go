package checkpoint

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Checkpoint is a committed checkpoint whose files matched its manifest
// when it was committed or loaded.
type Checkpoint struct {
	dir string
	m   Manifest
	raw []byte // manifest.json's bytes
}

// ID is the checkpoint's id.
func (c *Checkpoint) ID() string { return c.m.ID }

// Dir is the checkpoint's directory.
func (c *Checkpoint) Dir() string { return c.dir }

// ImageDir is the runsc image (restore --image-path).
func (c *Checkpoint) ImageDir() string { return filepath.Join(c.dir, ImageDirName) }

// WorkDir is the copy of /work ("" when the checkpoint has none). Copy it
// (CopyTree) to the restored sandbox's /work; never use it in place, a
// fork would write into the checkpoint.
func (c *Checkpoint) WorkDir() string {
	for _, f := range c.m.Files {
		if f.Path == WorkDirName && f.Type == TypeDir {
			return filepath.Join(c.dir, WorkDirName)
		}
	}
	return ""
}

// Manifest returns a copy of the manifest.
func (c *Checkpoint) Manifest() Manifest {
	m := c.m
	if c.m.UID != nil {
		uid := *c.m.UID
		m.UID = &uid
	}
	m.Files = append([]File(nil), c.m.Files...)
	m.SkillDigests = make(map[string]string, len(c.m.SkillDigests))
	for k, v := range c.m.SkillDigests {
		m.SkillDigests[k] = v
	}
	return m
}

// Digest is "sha256:" and the hex of the manifest's bytes: what the audit
// log records for the checkpoint (the manifest holds every file's digest).
func (c *Checkpoint) Digest() string {
	sum := sha256.Sum256(c.raw)
	return hexDigest(sum[:])
}

// Load returns checkpoint id after re-hashing every file of it: a file
// changed, missing or added since the commit is refused, named.
func (s *Store) Load(id string) (*Checkpoint, error) {
	dir, err := s.path(id)
	if err != nil {
		return nil, err
	}
	raw, m, err := readManifest(dir, id)
	if err != nil {
		return nil, err
	}
	files, _, _, err := scan(dir)
	if err != nil {
		return nil, errkind.Errorf(ErrCorrupt, "checkpoint %s: %w", id, err)
	}
	if err := compare(m.Files, files); err != nil {
		return nil, errkind.Errorf(ErrCorrupt, "checkpoint %s: %s since it was made, so it cannot be trusted: remove it (the session starts fresh)", id, err)
	}
	return &Checkpoint{dir: dir, m: *m, raw: raw}, nil
}

// path is the dir of a committed checkpoint id; ErrNotFound if none.
func (s *Store) path(id string) (string, error) {
	if !ValidID(id) {
		return "", errkind.Errorf(ErrNotFound, "no checkpoint %q: a checkpoint id is ck- and 24 hex digits", id)
	}
	dir := filepath.Join(s.dir, id)
	st, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", errkind.Errorf(ErrNotFound, "no checkpoint %s in %s", id, s.dir)
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if !st.IsDir() {
		return "", errkind.Errorf(ErrCorrupt, "checkpoint %s: %s is a %v, not a directory: remove it", id, dir, st.Mode().Type())
	}
	return dir, nil
}

// readManifest reads and parses dir's manifest, which must be id's.
func readManifest(dir, id string) ([]byte, *Manifest, error) {
	f, err := os.OpenFile(filepath.Join(dir, ManifestName), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, errkind.Errorf(ErrCorrupt, "checkpoint %s has no readable manifest: %w", id, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, nil, errkind.Errorf(ErrCorrupt, "read the manifest of checkpoint %s: %w", id, err)
	}
	m, err := ParseManifest(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if m.ID != id {
		return nil, nil, errkind.Errorf(ErrCorrupt, "checkpoint %s holds the manifest of %s: remove it", id, m.ID)
	}
	return raw, m, nil
}

// compare says how the files on disk differ from the manifest's, naming
// the first file that does ("" when they match).
func compare(want, have []File) error {
	i, j := 0, 0
	for i < len(want) || j < len(have) {
		switch {
		case j == len(have) || (i < len(want) && want[i].Path < have[j].Path):
			return fmt.Errorf("%s is missing", want[i].Path)
		case i == len(want) || have[j].Path < want[i].Path:
			return fmt.Errorf("%s was added", have[j].Path)
		}
		w, h := want[i], have[j]
		switch {
		case w.Type != h.Type:
			return fmt.Errorf("%s became a %s (it was a %s)", w.Path, h.Type, w.Type)
		case w.Size != h.Size || w.SHA256 != h.SHA256:
			return fmt.Errorf("%s changed (%d bytes, sha256 %s; the manifest says %d bytes, sha256 %s)", w.Path, h.Size, short(h.SHA256), w.Size, short(w.SHA256))
		case w.Mode != h.Mode:
			return fmt.Errorf("%s changed mode to %#o (the manifest says %#o)", w.Path, h.Mode, w.Mode)
		}
		i++
		j++
	}
	return nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}
