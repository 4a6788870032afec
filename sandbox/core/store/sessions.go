package store

// Sessions are per-conversation state: which skills a host has loaded, in
// which order. They are kept in the state KV (bbolt under the state
// directory, or etcd shared by replicas) so a daemon restart (upgrade,
// crash) does not silently drop a conversation's loaded skills: the host goes on with the same session_id. A session belongs
// to the uid that created it; other uids get "not found", never "forbidden",
// so session ids cannot be probed.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/runtime/errkind"
)

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

// SessionStore keeps sessions in a KV. Reads are cheap (no write); use
// marks are kept in memory and written by Update and by the sweep, so Get
// can sit on the hot path of every call. With replicas sharing the KV, each
// writes its own marks; a session expires only when no replica's sweep
// has written a use within the TTL.
type SessionStore struct {
	kv   KV
	opts SessionOptions
	log  hclog.Logger

	// createMu makes Create's count of an owner's sessions and its write
	// one step within this process (across replicas the bound is per
	// replica's view: two concurrent creates may both pass it).
	createMu sync.Mutex

	mu      sync.Mutex
	touched map[string]time.Time // last use not yet written to disk
	hooks   []func(Session)      // OnExpire and AddExpireHook's, under mu
}

// NewSessionStore returns the session store over kv.
func NewSessionStore(kv KV, opts SessionOptions) *SessionStore {
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
	s := &SessionStore{kv: kv, opts: opts, log: log.Named("sessions"), touched: map[string]time.Time{}}
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
	return fmt.Errorf("session %q not found: call sessions.create for a new one: %w", id, errkind.NotFound)
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

func encodeSession(ses *Session) ([]byte, error) {
	return json.Marshal(sessionRecord{V: 1, Session: *ses})
}

// load decodes v, the stored record of id, for uid; another uid's session,
// an expired one and a missing one (v nil) are all errkind.NotFound.
func (s *SessionStore) load(v []byte, id string, uid uint32, now time.Time) (*Session, error) {
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
		return nil, fmt.Errorf("session %q expired after %s unused: call sessions.create for a new one: %w", id, s.opts.TTL, errkind.NotFound)
	}
	return ses, nil
}

// Exists reports whether the store holds session id at all (expired ones
// until a sweep removes them, with their hooks). A store that cannot be
// read holds nothing, as far as the caller can tell.
func (s *SessionStore) Exists(id string) bool {
	ctx, cancel := opContext()
	defer cancel()
	v, err := s.kv.Get(ctx, bucketSessions, id)
	if err != nil {
		s.log.Warn("reading a session failed", "session", id, "error", err)
	}
	return v != nil
}

// Owner is the uid that owns session id, for the daemon's own
// bookkeeping (never an answer to a caller); ok is false when the store
// does not hold it, or cannot be read.
func (s *SessionStore) Owner(id string) (uid uint32, ok bool) {
	ctx, cancel := opContext()
	defer cancel()
	v, err := s.kv.Get(ctx, bucketSessions, id)
	if err != nil || v == nil {
		return 0, false
	}
	ses, err := decodeSession(v)
	if err != nil {
		return 0, false
	}
	return ses.OwnerUID, true
}

// Create starts a session owned by owner.
func (s *SessionStore) Create(owner uint32) (*Session, error) {
	id, err := randomID("ses_")
	if err != nil {
		return nil, err
	}
	now := s.now()
	ses := &Session{ID: id, OwnerUID: owner, Created: now, LastUsed: now, Active: []ActiveSkill{}}
	ctx, cancel := opContext()
	defer cancel()
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if s.opts.MaxPerOwner > 0 {
		all, err := s.kv.List(ctx, bucketSessions)
		if err != nil {
			return nil, fmt.Errorf("counting uid %d's sessions: %w", owner, err)
		}
		n := 0
		for _, e := range all {
			var o struct {
				OwnerUID uint32 `json:"owner_uid"`
			}
			if json.Unmarshal(e.Value, &o) == nil && o.OwnerUID == owner {
				if other, err := decodeSession(e.Value); err == nil && !s.expired(other, now) {
					n++
				}
			}
		}
		if n >= s.opts.MaxPerOwner {
			return nil, fmt.Errorf("uid %d already has %d open sessions (the limit): close some with sessions.close: %w", owner, n, errkind.LimitExceeded)
		}
	}
	v, err := encodeSession(ses)
	if err != nil {
		return nil, err
	}
	err = s.kv.Update(ctx, bucketSessions, id, func(old []byte) ([]byte, error) {
		if old != nil {
			return nil, fmt.Errorf("session id %s is taken (random ids collided): call sessions.create again: %w", id, errkind.Internal)
		}
		return v, nil
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
	if !ValidID(id, "ses_") {
		return nil, notFoundSession(id)
	}
	now := s.now()
	ctx, cancel := opContext()
	defer cancel()
	v, err := s.kv.Get(ctx, bucketSessions, id)
	if err != nil {
		return nil, fmt.Errorf("reading session %q: %w", id, err)
	}
	ses, err := s.load(v, id, uid, now)
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
// returned as is. fn must be quick, must not call the store and may run
// more than once (when another replica changed the session meanwhile, it
// runs again on the new state), so it must only change the session and
// record results for the caller. ID, OwnerUID and Created cannot be
// changed; LastUsed is set to now. The *Session fn last received stays
// valid (and holds the written state) after Update returns.
func (s *SessionStore) Update(id string, uid uint32, fn func(*Session) error) error {
	if !ValidID(id, "ses_") {
		return notFoundSession(id)
	}
	now := s.now()
	ctx, cancel := opContext()
	defer cancel()
	err := s.kv.Update(ctx, bucketSessions, id, func(old []byte) ([]byte, error) {
		ses, err := s.load(old, id, uid, now)
		if err != nil {
			return nil, err
		}
		orig := *ses
		if err := fn(ses); err != nil {
			return nil, err
		}
		ses.ID, ses.OwnerUID, ses.Created, ses.LastUsed = orig.ID, orig.OwnerUID, orig.Created, now
		if ses.Active == nil {
			ses.Active = []ActiveSkill{}
		}
		return encodeSession(ses)
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
	if !ValidID(id, "ses_") {
		return notFoundSession(id)
	}
	now := s.now()
	ctx, cancel := opContext()
	defer cancel()
	err := s.kv.Update(ctx, bucketSessions, id, func(old []byte) ([]byte, error) {
		if _, err := s.load(old, id, uid, now); err != nil {
			return nil, err
		}
		return nil, nil
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
	out, err := s.live("listing", func(ses *Session) bool { return ses.OwnerUID == uid })
	if err != nil {
		return nil, err
	}
	for _, ses := range out {
		ses.LastUsed = s.lastUsed(ses)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Count is how many sessions are open (not expired), of every uid: all
// that the store holds, so the sessions of every replica sharing it.
func (s *SessionStore) Count() (int, error) {
	out, err := s.live("counting", func(*Session) bool { return true })
	return len(out), err
}

// live is the sessions keep selects that have not expired; doing names
// the work in an error ("listing sessions: …").
func (s *SessionStore) live(doing string, keep func(*Session) bool) ([]*Session, error) {
	now := s.now()
	ctx, cancel := opContext()
	defer cancel()
	all, err := s.kv.List(ctx, bucketSessions)
	if err != nil {
		return nil, fmt.Errorf("%s sessions: %w", doing, err)
	}
	var out []*Session
	for _, e := range all {
		ses, err := decodeSession(e.Value)
		if err != nil {
			return nil, err
		}
		if keep(ses) && !s.expired(ses, now) {
			out = append(out, ses)
		}
	}
	return out, nil
}

// Sweep deletes expired sessions and writes pending use marks to the store,
// so a restart (or another replica) sees them. It returns how many sessions
// expired. Each session is swept on its own, re-checked as it is then, so
// a replica that used or closed it meanwhile wins, and of replicas
// sweeping at once only the one that deletes a session reports its expiry.
func (s *SessionStore) Sweep() (int, error) {
	now := s.now()
	ctx, cancel := opContext()
	defer cancel()
	all, err := s.kv.List(ctx, bucketSessions)
	if err != nil {
		return 0, fmt.Errorf("sweeping sessions: %w", err)
	}
	var gone []Session
	var flushed []string
	for _, e := range all {
		var expired *Session
		wrote := false
		err := s.kv.Update(ctx, bucketSessions, e.Key, func(v []byte) ([]byte, error) {
			expired, wrote = nil, false
			if v == nil {
				return nil, nil
			}
			ses, err := decodeSession(v)
			if err != nil {
				s.log.Warn("dropping unreadable session record", "session", e.Key, "error", err)
				return nil, nil
			}
			if s.expired(ses, now) {
				expired = ses
				return nil, nil
			}
			if lu := s.lastUsed(ses); lu.After(ses.LastUsed) {
				ses.LastUsed = lu
				wrote = true
				return encodeSession(ses)
			}
			return v, nil
		})
		if err != nil {
			return 0, fmt.Errorf("sweeping sessions: session %s: %w", e.Key, err)
		}
		if expired != nil {
			gone = append(gone, *expired)
		}
		if wrote {
			flushed = append(flushed, e.Key)
		}
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
