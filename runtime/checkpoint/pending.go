package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Pending is a checkpoint being made: a private temp dir inside the store
// that runsc writes the image into and the caller copies /work into. It
// becomes a Checkpoint by Commit; Abort removes it (call it in a defer: it
// does nothing after a Commit).
type Pending struct {
	s    *Store
	id   string
	dir  string
	done bool
	acct Account
	// Under s.mu: the bytes reserved (what the store counts for it) and
	// those charged of them so far.
	reserved, spent int64
}

// Begin starts a checkpoint: a new pending dir with an empty ImageDir.
// It is charged to no session's or uid's budget; BeginFor names whose.
func (s *Store) Begin() (*Pending, error) { return s.BeginFor(Account{}) }

// BeginFor starts a checkpoint of account a's (Commit records a.UID in
// the manifest).
func (s *Store) BeginFor(a Account) (*Pending, error) {
	dir := filepath.Join(s.dir, pendingName())
	if err := os.Mkdir(dir, DirMode); err != nil {
		return nil, fmt.Errorf("begin checkpoint in %s: %w", s.dir, err)
	}
	p := &Pending{s: s, id: "ck-" + randHex(12), dir: dir, acct: a}
	s.mu.Lock()
	s.pending[p] = true
	s.mu.Unlock()
	if err := os.Mkdir(p.ImageDir(), DirMode); err != nil {
		p.Abort()
		return nil, fmt.Errorf("begin checkpoint in %s: %w", s.dir, err)
	}
	return p, nil
}

// ID is the id the checkpoint will have.
func (p *Pending) ID() string { return p.id }

// ImageDir is where runsc writes the image (--image-path); it exists.
func (p *Pending) ImageDir() string { return filepath.Join(p.dir, ImageDirName) }

// WorkDir is where the caller copies /work (CopyTree makes it); it does
// not exist yet. A checkpoint without it has no workspace copy.
func (p *Pending) WorkDir() string { return filepath.Join(p.dir, WorkDirName) }

// Abort removes the pending dir. It does nothing after Commit succeeded
// or a first Abort.
func (p *Pending) Abort() error {
	if p.done {
		return nil
	}
	p.done = true
	p.s.mu.Lock()
	delete(p.s.pending, p)
	p.s.mu.Unlock()
	if err := removeTree(p.dir); err != nil {
		return fmt.Errorf("remove unfinished checkpoint %s: %w", p.dir, err)
	}
	return nil
}

// Commit turns the pending dir into the checkpoint m describes: it
// refuses an image runsc did not finish (a missing or empty file), hashes
// every file into m.Files and m.TotalBytes, sets m.Format, m.ID and (if
// zero) m.Created, checks the store's budget, writes the manifest (0600)
// and renames the dir into place. On an error the pending dir stays, for
// the caller to Abort (or to Commit again after Prune).
func (p *Pending) Commit(m Manifest) (*Checkpoint, error) {
	if p.done {
		return nil, fmt.Errorf("commit checkpoint %s: already committed or aborted", p.id)
	}
	if err := checkRunscImage(p.ImageDir()); err != nil {
		return nil, fmt.Errorf("commit checkpoint %s: %w", p.id, err)
	}
	l, err := list(p.dir)
	if err != nil {
		return nil, fmt.Errorf("commit checkpoint %s: %w", p.id, err)
	}
	// Within the budgets before a byte of it is read for its digests.
	if err := p.reserveTo(l.disk + int64(len(l.files))*EntryBytes); err != nil {
		return nil, err
	}
	if err := l.hash(p.dir); err != nil {
		return nil, fmt.Errorf("commit checkpoint %s: %w", p.id, err)
	}
	m.Format, m.ID, m.Files, m.TotalBytes, m.DiskBytes = Format, p.id, l.files, l.total, l.disk
	if m.Session == "" {
		m.Session = p.acct.Session
	}
	if p.acct.HasUID {
		uid := p.acct.UID
		m.UID = &uid
	}
	if m.Created.IsZero() {
		m.Created = time.Now().UTC()
	}
	if m.SkillDigests == nil {
		m.SkillDigests = map[string]string{}
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("commit checkpoint %s: %w", p.id, err)
	}
	data, err := m.encode()
	if err != nil {
		return nil, fmt.Errorf("commit checkpoint %s: %w", p.id, err)
	}

	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	need := m.charged(len(data))
	if err := s.fits(p, need-p.reserved); err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(p.dir, ManifestName), data); err != nil {
		return nil, fmt.Errorf("commit checkpoint %s: %w", p.id, err)
	}
	final := filepath.Join(s.dir, p.id)
	if err := os.Rename(p.dir, final); err != nil {
		os.Remove(filepath.Join(p.dir, ManifestName))
		return nil, fmt.Errorf("commit checkpoint %s: %w", p.id, err)
	}
	p.done = true
	delete(s.pending, p)
	s.kept[p.id] = kept{acct: m.account(), bytes: need}
	syncDir(s.dir)
	return &Checkpoint{dir: final, m: m, raw: data}, nil
}

// checkRunscImage refuses an image dir runsc did not fill: no
// checkpoint.img, or any of its files empty (what a failed checkpoint
// leaves).
func checkRunscImage(dir string) error {
	for _, name := range runscFiles {
		st, err := os.Lstat(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist) && name != RunscImageFile:
			continue // compressed: one file
		case errors.Is(err, fs.ErrNotExist):
			return errkind.Errorf(ErrCorrupt, "runsc left no %s in %s: the checkpoint failed", name, dir)
		case err != nil:
			return err
		case !st.Mode().IsRegular():
			return errkind.Errorf(ErrCorrupt, "%s in %s is a %v, not a file runsc wrote", name, dir, st.Mode().Type())
		case st.Size() == 0:
			return errkind.Errorf(ErrCorrupt, "runsc left an empty %s: the checkpoint failed", name)
		}
	}
	return nil
}

func writeFileSync(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}
