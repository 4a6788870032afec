package store

// Sessions are per-conversation state: which skills a host has loaded, in
// which order. They are kept in a bbolt database under the state directory so
// a daemon restart (upgrade, crash) does not silently drop a conversation's
// loaded skills: the host goes on with the same session_id. A session belongs
// to the uid that created it; other uids get "not found", never "forbidden",
// so session ids cannot be probed.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/sandbox/api"
	bolt "go.etcd.io/bbolt"
)

// StateFile is the database's name inside the state directory.
const StateFile = "state.db"

const stateSchema = 1

var (
	bucketMeta          = []byte("meta")
	bucketSessions      = []byte("sessions")
	bucketConfirmations = []byte("confirmations")
	keySchema           = []byte("schema")
)

// StateDB is the daemon's persistent state (<state_dir>/state.db), shared by
// the SessionStore and the ConfirmationStore. Only one process may hold it
// open; a second daemon on the same state directory fails to open it.
type StateDB struct {
	db   *bolt.DB
	path string
}

// OpenStateDB opens (creating if needed) <stateDir>/state.db. The directory
// is created 0700 and the file 0600: sessions name what a user is doing.
func OpenStateDB(stateDir string) (*StateDB, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	path := filepath.Join(stateDir, StateFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("state database %s is in use by another process (is another skillbox serving with this state_dir?): %w", path, api.ErrUnavailable)
	}
	if err != nil {
		return nil, fmt.Errorf("opening state database %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if v := meta.Get(keySchema); v != nil {
			if string(v) != fmt.Sprint(stateSchema) {
				return fmt.Errorf("state database %s has schema %s; this skillbox knows schema %d (downgrade?)", path, v, stateSchema)
			}
		} else if err := meta.Put(keySchema, []byte(fmt.Sprint(stateSchema))); err != nil {
			return err
		}
		for _, b := range [][]byte{bucketSessions, bucketConfirmations} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialising state database: %w", err)
	}
	return &StateDB{db: db, path: path}, nil
}

// Path is the database file.
func (s *StateDB) Path() string { return s.path }

// Close closes the database; stop the stores' sweepers and the server first.
func (s *StateDB) Close() error { return s.db.Close() }

// ActiveSkill is a skill loaded in a session: the version (digest) and
// directory it had when loaded, so a later change on disk is noticed.
type ActiveSkill struct {
	Name     string    `json:"name"`
	Digest   string    `json:"digest"`
	Dir      string    `json:"dir"`
	LoadedAt time.Time `json:"loaded_at"`
}

// Session is one conversation's state.
type Session struct {
	ID       string    `json:"id"`
	OwnerUID uint32    `json:"owner_uid"`
	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"last_used"`
	// Active holds the loaded skills in load order (the most recent last).
	Active []ActiveSkill `json:"active"`
}

// sessionRecord is a Session as stored, with a version for later changes.
type sessionRecord struct {
	V int `json:"v"`
	Session
}

// SessionOptions configure a SessionStore; zero values take defaults.
type SessionOptions struct {
	// TTL is how long a session may go unused before it expires (default
	// 24h; negative: never).
	TTL time.Duration
	// MaxPerOwner bounds live sessions per uid (default 256; negative: no
	// bound), so one local user cannot fill the daemon's disk.
	MaxPerOwner int
	// Logger is named "sessions".
	Logger hclog.Logger
	// OnExpire is called (outside any transaction) for each session a sweep
	// removes, e.g. to audit it.
	OnExpire func(Session)
	// Now replaces time.Now in tests.
	Now func() time.Time
}

// Defaults for SessionOptions.
const (
	DefaultSessionTTL         = 24 * time.Hour
	DefaultMaxSessionsPerUser = 256
)

// SessionStore keeps sessions in the StateDB. Reads are cheap (a read
// transaction, no disk write); use marks are kept in memory and written by
// Update and by the sweep, so Get can sit on the hot path of every call.
type SessionStore struct {
	db   *bolt.DB
	opts SessionOptions
	log  hclog.Logger

	mu      sync.Mutex
	touched map[string]time.Time // last use not yet written to disk
	hooks   []func(Session)      // OnExpire and AddExpireHook's, under mu
}

// NewSessionStore returns the session store over st.
func NewSessionStore(st *StateDB, opts SessionOptions) *SessionStore {
	if opts.TTL == 0 {
		opts.TTL = DefaultSessionTTL
	}
	if opts.MaxPerOwner == 0 {
		opts.MaxPerOwner = DefaultMaxSessionsPerUser
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &SessionStore{db: st.db, opts: opts, log: log.Named("sessions"), touched: map[string]time.Time{}}
	if opts.OnExpire != nil {
		s.hooks = append(s.hooks, opts.OnExpire)
	}
	return s
}

// AddExpireHook adds f to the functions called (outside any transaction,
// after SessionOptions.OnExpire) for each session a sweep removes. The
// daemon uses it to audit expiries.
func (s *SessionStore) AddExpireHook(f func(Session)) {
	s.mu.Lock()
	s.hooks = append(s.hooks, f)
	s.mu.Unlock()
}

func (s *SessionStore) now() time.Time { return s.opts.Now().UTC().Round(0) }

// randomID returns prefix + 128 random bits in hex.
func randomID(prefix string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generating an id: %w", err)
	}
	return prefix + hex.EncodeToString(b[:]), nil
}

// ValidID reports whether id looks like prefix + 32 lower-case hex digits;
// anything else is "not found" without touching the database.
func ValidID(id, prefix string) bool {
	if !strings.HasPrefix(id, prefix) || len(id) != len(prefix)+32 {
		return false
	}
	for _, c := range id[len(prefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func notFoundSession(id string) error {
	return fmt.Errorf("session %q not found: call sessions.create for a new one: %w", id, api.ErrNotFound)
}

// lastUsed is the later of the stored and the in-memory use time.
func (s *SessionStore) lastUsed(ses *Session) time.Time {
	s.mu.Lock()
	t, ok := s.touched[ses.ID]
	s.mu.Unlock()
	if ok && t.After(ses.LastUsed) {
		return t
	}
	return ses.LastUsed
}

func (s *SessionStore) expired(ses *Session, now time.Time) bool {
	return s.opts.TTL > 0 && now.Sub(s.lastUsed(ses)) >= s.opts.TTL
}

func decodeSession(v []byte) (*Session, error) {
	var r sessionRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("corrupt session record: %w", err)
	}
	return &r.Session, nil
}

func putSession(b *bolt.Bucket, ses *Session) error {
	v, err := json.Marshal(sessionRecord{V: 1, Session: *ses})
	if err != nil {
		return err
	}
	return b.Put([]byte(ses.ID), v)
}

// load reads id for uid inside tx; another uid's session, an expired one
// and a missing one are all api.ErrNotFound.
func (s *SessionStore) load(tx *bolt.Tx, id string, uid uint32, now time.Time) (*Session, error) {
	if !ValidID(id, "ses_") {
		return nil, notFoundSession(id)
	}
	v := tx.Bucket(bucketSessions).Get([]byte(id))
	if v == nil {
		return nil, notFoundSession(id)
	}
	ses, err := decodeSession(v)
	if err != nil {
		return nil, err
	}
	if ses.OwnerUID != uid {
		return nil, notFoundSession(id)
	}
	if s.expired(ses, now) {
		return nil, fmt.Errorf("session %q expired after %s unused: call sessions.create for a new one: %w", id, s.opts.TTL, api.ErrNotFound)
	}
	return ses, nil
}

// Exists reports whether the store holds session id at all (expired ones
// until a sweep removes them, with their hooks).
func (s *SessionStore) Exists(id string) bool {
	found := false
	s.db.View(func(tx *bolt.Tx) error {
		found = tx.Bucket(bucketSessions).Get([]byte(id)) != nil
		return nil
	})
	return found
}

// Create starts a session owned by owner.
func (s *SessionStore) Create(owner uint32) (*Session, error) {
	id, err := randomID("ses_")
	if err != nil {
		return nil, err
	}
	now := s.now()
	ses := &Session{ID: id, OwnerUID: owner, Created: now, LastUsed: now, Active: []ActiveSkill{}}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		if s.opts.MaxPerOwner > 0 {
			n := 0
			err := b.ForEach(func(_, v []byte) error {
				var o struct {
					OwnerUID uint32 `json:"owner_uid"`
				}
				if json.Unmarshal(v, &o) == nil && o.OwnerUID == owner {
					if other, err := decodeSession(v); err == nil && !s.expired(other, now) {
						n++
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			if n >= s.opts.MaxPerOwner {
				return fmt.Errorf("uid %d already has %d open sessions (the limit): close some with sessions.close: %w", owner, n, api.ErrLimitExceeded)
			}
		}
		return putSession(b, ses)
	})
	if err != nil {
		return nil, err
	}
	s.log.Debug("session created", "session", id, "uid", owner)
	return ses, nil
}

// Get returns session id if uid owns it and it has not expired, and marks
// it used.
func (s *SessionStore) Get(id string, uid uint32) (*Session, error) {
	now := s.now()
	var ses *Session
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		ses, err = s.load(tx, id, uid, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.touched[id] = now
	s.mu.Unlock()
	ses.LastUsed = now
	return ses, nil
}

// Update changes session id (owned by uid) with fn, atomically: fn works on a
// copy that is written back only when fn returns nil, and fn's error is
// returned as is. fn runs inside the database's write transaction, so it must
// be quick and must not call the store. ID, OwnerUID and Created cannot be
// changed; LastUsed is set to now. The *Session fn received stays valid (and
// holds the written state) after Update returns.
func (s *SessionStore) Update(id string, uid uint32, fn func(*Session) error) error {
	now := s.now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		ses, err := s.load(tx, id, uid, now)
		if err != nil {
			return err
		}
		orig := *ses
		if err := fn(ses); err != nil {
			return err
		}
		ses.ID, ses.OwnerUID, ses.Created, ses.LastUsed = orig.ID, orig.OwnerUID, orig.Created, now
		if ses.Active == nil {
			ses.Active = []ActiveSkill{}
		}
		return putSession(tx.Bucket(bucketSessions), ses)
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.touched, id)
	s.mu.Unlock()
	return nil
}

// Close ends session id (owned by uid).
func (s *SessionStore) Close(id string, uid uint32) error {
	now := s.now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		if _, err := s.load(tx, id, uid, now); err != nil {
			return err
		}
		return tx.Bucket(bucketSessions).Delete([]byte(id))
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.touched, id)
	s.mu.Unlock()
	s.log.Debug("session closed", "session", id, "uid", uid)
	return nil
}

// List returns uid's live sessions, oldest first.
func (s *SessionStore) List(uid uint32) ([]*Session, error) {
	now := s.now()
	var out []*Session
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(_, v []byte) error {
			ses, err := decodeSession(v)
			if err != nil {
				return err
			}
			if ses.OwnerUID == uid && !s.expired(ses, now) {
				ses.LastUsed = s.lastUsed(ses)
				out = append(out, ses)
			}
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, err
}

// Sweep deletes expired sessions and writes pending use marks to disk, so a
// restart keeps them. It returns how many sessions expired.
func (s *SessionStore) Sweep() (int, error) {
	now := s.now()
	var gone []Session
	var flushed []string
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		var dels [][]byte
		var puts []*Session
		err := b.ForEach(func(k, v []byte) error {
			ses, err := decodeSession(v)
			if err != nil {
				s.log.Warn("dropping unreadable session record", "session", string(k), "error", err)
				dels = append(dels, append([]byte(nil), k...))
				return nil
			}
			if s.expired(ses, now) {
				dels = append(dels, append([]byte(nil), k...))
				gone = append(gone, *ses)
				return nil
			}
			if lu := s.lastUsed(ses); lu.After(ses.LastUsed) {
				ses.LastUsed = lu
				puts = append(puts, ses)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range dels {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		for _, ses := range puts {
			if err := putSession(b, ses); err != nil {
				return err
			}
			flushed = append(flushed, ses.ID)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sweeping sessions: %w", err)
	}
	s.mu.Lock()
	hooks := s.hooks
	for _, ses := range gone {
		delete(s.touched, ses.ID)
	}
	for _, id := range flushed {
		// Only forget the mark if no newer use arrived meanwhile.
		if t, ok := s.touched[id]; ok && !t.After(now) {
			delete(s.touched, id)
		}
	}
	s.mu.Unlock()
	for _, ses := range gone {
		s.log.Info("session expired", "session", ses.ID, "uid", ses.OwnerUID, "last_used", ses.LastUsed)
		for _, f := range hooks {
			f(ses)
		}
	}
	return len(gone), nil
}

// RunSweeper sweeps every interval (default: a tenth of the TTL, between 10s
// and 5m) until ctx is done, and once more on the way out to save use marks.
func (s *SessionStore) RunSweeper(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = min(max(s.opts.TTL/10, 10*time.Second), 5*time.Minute)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if _, err := s.Sweep(); err != nil {
				s.log.Warn("final sweep failed", "error", err)
			}
			return
		case <-t.C:
			if _, err := s.Sweep(); err != nil {
				s.log.Error("sweep failed", "error", err)
			}
		}
	}
}
