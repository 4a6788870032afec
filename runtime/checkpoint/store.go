package checkpoint

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

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
