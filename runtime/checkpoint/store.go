package checkpoint

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Layout of a checkpoint's directory, <store>/<id>/.
const (
	// ImageDirName holds runsc's image files (runsc checkpoint
	// --image-path).
	ImageDirName = "image"
	// WorkDirName holds the copy of the sandbox's /work.
	WorkDirName = "work"
)

// RunscImageFile is the file every runsc checkpoint writes; the pages
// files are absent when runsc compresses the image into it.
const RunscImageFile = "checkpoint.img"

// runscFiles are the files runsc writes into the image dir. A failed
// checkpoint leaves them all empty.
var runscFiles = []string{RunscImageFile, "pages.img", "pages_meta.img"}

// DirMode is the mode of the store's directory and of everything the
// Store makes in it: checkpoints hold all of a sandbox's memory.
const DirMode os.FileMode = 0o700

// The config keys that set a Store's Limits, for messages.
const (
	BudgetKey           = "sessions.checkpoint_budget"
	BudgetPerSessionKey = "sessions.checkpoint_budget_per_session"
	BudgetPerUIDKey     = "sessions.checkpoint_budget_per_uid"
	DiskPercentKey      = "sessions.checkpoint_disk_percent"
	MinFreeKey          = "audit.min_free"
)

// Limits bound what a Store's checkpoints may take of the disk. Each is
// checked whenever a checkpoint reserves more (Pending.Reserve, Charge,
// Commit), so a checkpoint that passes one stops before it writes what
// passes it. 0 is no limit.
type Limits struct {
	// Total is the budget of all checkpoints together, in bytes.
	Total int64
	// PerSession and PerUID are the budgets of one session's and one
	// uid's checkpoints (BeginFor says whose a checkpoint is).
	PerSession, PerUID int64
	// DiskPercent is the share of the store's filesystem all checkpoints
	// may take, in percent of its size.
	DiskPercent int
	// MinFree is the free space the filesystem must keep: a checkpoint
	// never takes it below (the audit log needs it).
	MinFree int64
}

// Account says whose a checkpoint is, for the per-session and per-uid
// budgets.
type Account struct {
	Session string
	UID     uint32
	HasUID  bool // false: no uid's budget is charged
}

// kept is a committed checkpoint as the Store charges it.
type kept struct {
	acct  Account
	bytes int64
}

// Name prefixes of the store's hidden directories.
const (
	pendingPrefix  = ".pending-"
	removingPrefix = ".removing-"
)

// Store keeps checkpoints in one private directory, one subdirectory per
// checkpoint, within a disk budget. Its methods are safe for concurrent
// use by one process; two processes must not share a store.
type Store struct {
	dir string
	lim Limits
	mu  sync.Mutex
	// Under mu: the committed checkpoints by id (read from their
	// manifests at Open, kept up to date since) and the pending ones with
	// what they reserved. Both hold only what is on disk, so they are as
	// bounded as the disk the budgets give.
	kept    map[string]kept
	pending map[*Pending]bool
	// statfs is the store filesystem's size and free bytes (a test may
	// replace it).
	statfs func(dir string) (size, free int64, err error)
}

// Open opens (making it if missing, mode 0700) the store in dir, with a
// budget in bytes for all its checkpoints together (0: no limit). It
// refuses a dir that is not this process's euid's or that other users may
// enter, saying how to fix it, and removes what makers that died left
// half-written.
func Open(dir string, budget int64) (*Store, error) {
	return OpenLimits(dir, Limits{Total: budget})
}

// OpenLimits is Open with all the Limits. What the committed checkpoints
// take is read from their manifests (a checkpoint whose manifest cannot be
// read counts as what its files take), so the accounts are right after a
// restart.
func OpenLimits(dir string, lim Limits) (*Store, error) {
	if lim.Total < 0 || lim.PerSession < 0 || lim.PerUID < 0 || lim.MinFree < 0 || lim.DiskPercent < 0 || lim.DiskPercent > 100 {
		return nil, fmt.Errorf("open checkpoint store %s: invalid limits %+v (sizes are at least 0, the disk percent 0 to 100)", dir, lim)
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return nil, fmt.Errorf("make checkpoint store %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("make checkpoint store %s: %w", dir, err)
	}
	if err := checkPrivate(dir); err != nil {
		return nil, err
	}
	s := &Store{dir: dir, lim: lim, kept: map[string]kept{}, pending: map[*Pending]bool{}, statfs: statfs}
	s.sweep()
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// load reads what the committed checkpoints take.
func (s *Store) load() error {
	ids, err := s.List()
	if err != nil {
		return err
	}
	for _, id := range ids {
		dir := filepath.Join(s.dir, id)
		raw, m, err := readManifest(dir, id)
		if err != nil {
			s.kept[id] = kept{bytes: du(dir)}
			continue
		}
		s.kept[id] = kept{acct: m.account(), bytes: m.charged(len(raw))}
	}
	return nil
}

// account is whose the manifest's checkpoint is.
func (m *Manifest) account() Account {
	a := Account{Session: m.Session}
	if m.UID != nil {
		a.UID, a.HasUID = *m.UID, true
	}
	return a
}

// charged is what the store charges for the manifest's checkpoint, whose
// manifest is raw bytes long.
func (m *Manifest) charged(raw int) int64 {
	n := m.DiskBytes
	if n == 0 {
		n = m.TotalBytes
	}
	return n + int64(raw)
}

func statfs(dir string) (size, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// checkPrivate refuses a store dir other users could read or write.
func checkPrivate(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return errkind.Errorf(ErrUnsafeDir, "open checkpoint store %s (it must be a directory, not a link): %w", dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat checkpoint store %s: %w", dir, err)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return errkind.Errorf(ErrUnsafeDir, "checkpoint store %s belongs to uid %d, not to this process's %d: checkpoints hold all of a sandbox's memory, so the store must be this user's own; remove it or choose another directory", dir, st.Uid, euid)
	}
	if m := st.Mode & 0o777; m&0o077 != 0 {
		return errkind.Errorf(ErrUnsafeDir, "checkpoint store %s has mode %#o, open to other users: checkpoints hold all of a sandbox's memory; run chmod 0700 %s (or remove it) and start again", dir, m, dir)
	}
	return nil
}

// sweep removes the pending dirs of makers that are gone and the rest of
// interrupted removals.
func (s *Store) sweep() {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, removingPrefix):
		case strings.HasPrefix(name, pendingPrefix) && !makerAlive(name):
		default:
			continue
		}
		removeTree(filepath.Join(s.dir, name))
	}
}

// removeTree is os.RemoveAll that also removes what sits in directories
// without write permission (a workspace copy keeps the modes the sandbox
// gave its dirs, and an ordinary user could not empty a 0555 one).
func removeTree(dir string) error {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, DirMode)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// pendingName is a pending dir's name: it carries its maker's pid.
func pendingName() string {
	return fmt.Sprintf("%s%d-%s", pendingPrefix, os.Getpid(), randHex(8))
}

// makerAlive says whether the process that made a pending dir may still
// run (a name it cannot parse counts as alive).
func makerAlive(name string) bool {
	pid, _, ok := strings.Cut(strings.TrimPrefix(name, pendingPrefix), "-")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil || n <= 0 {
		return true
	}
	return n == os.Getpid() || unix.Kill(n, 0) != unix.ESRCH
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("checkpoint: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Budget is the store's budget in bytes (0: no limit).
func (s *Store) Budget() int64 { return s.lim.Total }

// Limits are the store's limits.
func (s *Store) Limits() Limits { return s.lim }

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

// List returns the ids of the committed checkpoints, sorted.
func (s *Store) List() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", s.dir, err)
	}
	var ids []string
	for _, e := range ents {
		if ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Manifest returns checkpoint id's manifest without re-hashing its files
// (for listing; Load before restoring).
func (s *Store) Manifest(id string) (*Manifest, error) {
	dir, err := s.path(id)
	if err != nil {
		return nil, err
	}
	_, m, err := readManifest(dir, id)
	return m, err
}

// Usage is the disk the committed checkpoints use, in bytes: their files
// and manifests as their manifests say, or as found on disk for one whose
// manifest cannot be read (it counts until it is removed).
func (s *Store) Usage() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, k := range s.kept {
		n += k.bytes
	}
	return n, nil
}

// UsageOf is what the committed checkpoints of session (when not "") and
// of uid (when hasUID) take, in bytes.
func (s *Store) UsageOf(a Account) (session, uid int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.kept {
		if a.Session != "" && k.acct.Session == a.Session {
			session += k.bytes
		}
		if a.HasUID && k.acct.HasUID && k.acct.UID == a.UID {
			uid += k.bytes
		}
	}
	return session, uid
}

// du sums the sizes of the regular files under dir.
func du(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// Remove deletes checkpoint id. It is gone from List at once (renamed
// aside), even if deleting its files fails half-way (Open finishes that).
func (s *Store) Remove(id string) error {
	dir, err := s.path(id)
	if err != nil {
		return err
	}
	aside := filepath.Join(s.dir, removingPrefix+id+"-"+randHex(4))
	if err := os.Rename(dir, aside); err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", id, err)
	}
	s.mu.Lock()
	delete(s.kept, id)
	s.mu.Unlock()
	if err := removeTree(aside); err != nil {
		return fmt.Errorf("remove checkpoint %s: %w", id, err)
	}
	return nil
}

// Prune removes every committed checkpoint keep says no to and returns
// their ids; the first error stops it.
func (s *Store) Prune(keep func(id string) bool) ([]string, error) {
	ids, err := s.List()
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, id := range ids {
		if keep(id) {
			continue
		}
		if err := s.Remove(id); err != nil && !errors.Is(err, ErrNotFound) {
			return removed, err
		}
		removed = append(removed, id)
	}
	return removed, nil
}

// fmtBytes renders n in the largest binary unit it reaches.
func fmtBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, u := float64(n)/1024, 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	return fmt.Sprintf("%.1f %ciB", f, units[u])
}

// Reserve sets n more bytes aside for the checkpoint, or refuses them with
// an ErrBudgetExceeded error naming the budget they would pass, what uses
// it and the key that sets it: call it with what a walk of the tree to
// copy found (Measure) before copying it.
func (p *Pending) Reserve(n int64) error {
	if n <= 0 {
		return nil
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.done {
		return fmt.Errorf("checkpoint %s: already committed or aborted", p.id)
	}
	if err := p.s.fits(p, n); err != nil {
		return err
	}
	p.reserved += n
	return nil
}

// Charge counts n bytes about to be written into the checkpoint: within
// what was reserved, or reserving more (CopyOptions.Charge). A copy that
// passes the budgets stops at once, whatever was reserved before.
func (p *Pending) Charge(n int64) error {
	if n <= 0 {
		return nil
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.done {
		return fmt.Errorf("checkpoint %s: already committed or aborted", p.id)
	}
	if over := p.spent + n - p.reserved; over > 0 {
		if err := p.s.fits(p, over); err != nil {
			return err
		}
		p.reserved += over
	}
	p.spent += n
	return nil
}

// Reserved is what the checkpoint has reserved so far, in bytes.
func (p *Pending) Reserved() int64 {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.reserved
}

// reserveTo makes what the checkpoint reserved at least n.
func (p *Pending) reserveTo(n int64) error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if more := n - p.reserved; more > 0 {
		if err := p.s.fits(p, more); err != nil {
			return err
		}
		p.reserved += more
	}
	return nil
}

// fits says whether pending p may take n bytes more than it reserved:
// within its session's, its uid's and the total budget, the disk share,
// and above the filesystem's MinFree. Its error names the budget, what
// uses it and what to do. s.mu is held.
func (s *Store) fits(p *Pending, n int64) error {
	if n <= 0 {
		return nil
	}
	a := p.acct
	var total, sess, uid, unspent int64
	var count, uidCount int
	add := func(k Account, bytes int64) {
		total += bytes
		count++
		if a.Session != "" && k.Session == a.Session {
			sess += bytes
		}
		if a.HasUID && k.HasUID && k.UID == a.UID {
			uid += bytes
			uidCount++
		}
	}
	for _, k := range s.kept {
		add(k.acct, k.bytes)
	}
	for q := range s.pending {
		if q != p {
			add(q.acct, q.reserved)
			count--
			unspent += q.reserved - q.spent
		}
	}
	need := p.reserved + n
	what := "checkpoint " + p.id
	if a.Session != "" {
		what += " of session " + a.Session
	}
	fix := "delete files the session no longer needs from its /work (sparse files count at their length, each hard link once), close or resume sessions you no longer need paused"
	l := s.lim
	switch {
	case l.PerSession > 0 && a.Session != "" && sess+need > l.PerSession:
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s, and the session's other checkpoints use %s of its %s budget: %s, or raise %s",
			what, fmtBytes(need), fmtBytes(sess), fmtBytes(l.PerSession), fix, BudgetPerSessionKey)
	case l.PerUID > 0 && a.HasUID && uid+need > l.PerUID:
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s, and the %d other checkpoints of uid %d use %s of its %s budget: %s, or raise %s",
			what, fmtBytes(need), uidCount, a.UID, fmtBytes(uid), fmtBytes(l.PerUID), fix, BudgetPerUIDKey)
	case l.Total > 0 && total+need > l.Total:
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s, and the %d checkpoints kept already use %s of the %s budget: %s, end or fork fewer sessions, or raise %s",
			what, fmtBytes(need), count, fmtBytes(total), fmtBytes(l.Total), fix, BudgetKey)
	}
	if l.DiskPercent == 0 && l.MinFree == 0 {
		return nil
	}
	size, free, err := s.statfs(s.dir)
	if err != nil {
		return errkind.Errorf(ErrBudgetExceeded, "%s: cannot read the free space of %s's filesystem, so no checkpoint is written: %w", what, s.dir, err)
	}
	if share := size / 100 * int64(l.DiskPercent); l.DiskPercent > 0 && total+need > share {
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s, and the %d checkpoints kept already use %s of the %d%% (%s) of %s's filesystem they may take: %s, or raise %s",
			what, fmtBytes(need), count, fmtBytes(total), l.DiskPercent, fmtBytes(share), s.dir, fix, DiskPercentKey)
	}
	if left := free - unspent - n; l.MinFree > 0 && left < l.MinFree {
		return errkind.Errorf(ErrBudgetExceeded, "%s needs %s more, and %s's filesystem has %s free (%s of it promised to checkpoints being written): it would leave less than the %s the audit log needs (%s): free disk space or %s",
			what, fmtBytes(n), s.dir, fmtBytes(free), fmtBytes(unspent), fmtBytes(l.MinFree), MinFreeKey, fix)
	}
	return nil
}
