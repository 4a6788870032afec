package store

// Confirmations implement "a person approves this exact run": when policy
// says a run needs confirmation, the daemon records a pending request bound
// to the session and to a digest of everything that decides what the run
// does (RequestDigest). An approver approves or denies it; the host then
// repeats the call with the confirmation's id, and the run goes ahead only if
// the approval is still valid, belongs to that session and the repeated call
// hashes to the same digest. Approvals are used up by that one run.
// Confirmations live in the state KV, so a daemon restart between approval
// and use loses nothing, and with replicas sharing an etcd KV an approval
// used on one is refused on every other: Consume is a compare-and-swap.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

type confirmationRecord struct {
	V int `json:"v"`
	api.Confirmation
}

// Errors of Consume, Approve and Deny. Each wraps its errkind kind, so
// errors.Is matches the kind too; unlike a sentinel of errkind.New, its
// words stand for the kind's, and a front end's errkind.Detail drops them
// as it drops the kind's.
var (
	// ErrConfirmationDenied: an approver said no (kind denied).
	ErrConfirmationDenied error = &kindSentinel{"confirmation denied", errkind.Denied}
	// ErrConfirmationExpired, ErrConfirmationUsed, ErrConfirmationMismatch:
	// the confirmation_id cannot be used for this call; the host repeats
	// the call without it to ask for a new approval (kind invalid_params).
	ErrConfirmationExpired  error = &kindSentinel{"confirmation expired", errkind.InvalidParams}
	ErrConfirmationUsed     error = &kindSentinel{"confirmation already used", errkind.InvalidParams}
	ErrConfirmationMismatch error = &kindSentinel{"confirmation does not match this call", errkind.InvalidParams}
	// ErrConfirmationDecided: Approve or Deny of a confirmation that is no
	// longer open to that decision (kind invalid_params).
	ErrConfirmationDecided error = &kindSentinel{"confirmation already decided", errkind.InvalidParams}
)

// kindSentinel is a sentinel error that wraps its kind.
type kindSentinel struct {
	msg  string
	kind error
}

func (e *kindSentinel) Error() string { return e.msg }
func (e *kindSentinel) Unwrap() error { return e.kind }

// ConfirmationOptions configure a ConfirmationStore; zero values take
// defaults.
type ConfirmationOptions struct {
	// DefaultTTL is used when Request gets ttl <= 0 (default 15m).
	DefaultTTL time.Duration
	// MaxPendingPerOwner bounds open (pending) requests per uid, so a host
	// cannot flood approvers (default 32; negative: no bound).
	MaxPendingPerOwner int
	// Retention is how long final confirmations are kept (for
	// confirmations.list and late questions) before a sweep deletes them
	// (default 24h).
	Retention time.Duration
	// Logger is named "confirmations".
	Logger hclog.Logger
	// OnExpire is called (outside any transaction) once for each
	// confirmation whose expiry the store records: by Sweep, or by an
	// Approve, Deny or Consume that finds it timed out. The confirmation
	// passed is in state expired.
	OnExpire func(api.Confirmation)
	// Now replaces time.Now in tests.
	Now func() time.Time
}

// Defaults for ConfirmationOptions.
const (
	DefaultConfirmationTTL       = 15 * time.Minute
	DefaultMaxPendingPerOwner    = 32
	DefaultConfirmationRetention = 24 * time.Hour
)

// ConfirmationStore keeps confirmations in a KV. Who may approve is not its
// business: the caller checks the approver against policy before
// Approve/Deny, and the store records who decided.
type ConfirmationStore struct {
	kv   KV
	opts ConfirmationOptions
	log  hclog.Logger

	// requestMu makes Request's look for a duplicate, its count and its
	// write one step within this process (across replicas, two concurrent
	// requests may both pass: a duplicate request or one over the bound).
	requestMu sync.Mutex

	hookMu sync.Mutex
	hooks  []func(api.Confirmation)
}

// NewConfirmationStore returns the confirmation store over kv.
func NewConfirmationStore(kv KV, opts ConfirmationOptions) *ConfirmationStore {
	if opts.DefaultTTL <= 0 {
		opts.DefaultTTL = DefaultConfirmationTTL
	}
	if opts.MaxPendingPerOwner == 0 {
		opts.MaxPendingPerOwner = DefaultMaxPendingPerOwner
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultConfirmationRetention
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &ConfirmationStore{kv: kv, opts: opts, log: log.Named("confirmations")}
	if opts.OnExpire != nil {
		s.hooks = append(s.hooks, opts.OnExpire)
	}
	return s
}

// AddExpireHook adds f to the functions called like ConfirmationOptions.
// OnExpire (after it). The daemon uses it to audit expiries.
func (s *ConfirmationStore) AddExpireHook(f func(api.Confirmation)) {
	s.hookMu.Lock()
	s.hooks = append(s.hooks, f)
	s.hookMu.Unlock()
}

// expired tells the hooks about confirmations whose expiry was just
// committed.
func (s *ConfirmationStore) expired(cs ...*api.Confirmation) {
	if len(cs) == 0 {
		return
	}
	s.hookMu.Lock()
	hooks := s.hooks
	s.hookMu.Unlock()
	for _, c := range cs {
		s.log.Info("confirmation expired", "id", c.ID, "session", c.SessionID, "expires", c.Expires)
		for _, f := range hooks {
			f(*c)
		}
	}
}

func (s *ConfirmationStore) now() time.Time { return s.opts.Now().UTC().Round(0) }

// RequestOption adds to a confirmation request.
type RequestOption func(*api.Confirmation)

// WithDetails attaches what an approver should see besides the reason.
func WithDetails(d map[string]string) RequestOption {
	return func(c *api.Confirmation) {
		if len(d) == 0 {
			return
		}
		c.Details = make(map[string]string, len(d))
		for k, v := range d {
			c.Details[k] = v
		}
	}
}

func decodeConfirmation(v []byte) (*api.Confirmation, error) {
	var r confirmationRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("corrupt confirmation record: %w", err)
	}
	return &r.Confirmation, nil
}

func encodeConfirmation(c *api.Confirmation) ([]byte, error) {
	return json.Marshal(confirmationRecord{V: 1, Confirmation: *c})
}

// effective applies expiry: an open confirmation past Expires is expired.
func effective(c *api.Confirmation, now time.Time) api.ConfirmationState {
	if (c.State == api.ConfirmationPending || c.State == api.ConfirmationApproved) && !now.Before(c.Expires) {
		return api.ConfirmationExpired
	}
	return c.State
}

// Request records a pending confirmation for a run in sessionID (owned by
// ownerUID) whose request hashes to digest, valid for ttl (DefaultTTL when
// <= 0). If the same session already has a pending, unexpired request for
// the same digest, that one is returned instead, so a host that repeats the
// call before approval does not pile up requests.
func (s *ConfirmationStore) Request(sessionID string, ownerUID uint32, digest, reason, rule string, ttl time.Duration, opts ...RequestOption) (*api.Confirmation, error) {
	if digest == "" {
		return nil, fmt.Errorf("confirmation request without a digest: %w", errkind.InvalidParams)
	}
	if ttl <= 0 {
		ttl = s.opts.DefaultTTL
	}
	id, err := randomID("cnf_")
	if err != nil {
		return nil, err
	}
	now := s.now()
	c := &api.Confirmation{
		ID: id, SessionID: sessionID, Digest: digest, Reason: reason, Rule: rule,
		State: api.ConfirmationPending, Created: now, Expires: now.Add(ttl), RequestedBy: ownerUID,
	}
	for _, o := range opts {
		o(c)
	}
	ctx, cancel := opContext()
	defer cancel()
	s.requestMu.Lock()
	defer s.requestMu.Unlock()
	all, err := s.kv.List(ctx, bucketConfirmations)
	if err != nil {
		return nil, fmt.Errorf("reading the open confirmations: %w", err)
	}
	var existing *api.Confirmation
	pending := 0
	for _, e := range all {
		o, err := decodeConfirmation(e.Value)
		if err != nil || effective(o, now) != api.ConfirmationPending {
			continue
		}
		if o.SessionID == sessionID && o.Digest == digest && existing == nil {
			existing = o
		}
		if o.RequestedBy == ownerUID {
			pending++
		}
	}
	if existing == nil {
		if s.opts.MaxPendingPerOwner > 0 && pending >= s.opts.MaxPendingPerOwner {
			return nil, fmt.Errorf("uid %d already has %d confirmations waiting for an approver (the limit): wait for decisions before asking again: %w", ownerUID, pending, errkind.LimitExceeded)
		}
		v, err := encodeConfirmation(c)
		if err != nil {
			return nil, err
		}
		err = s.kv.Update(ctx, bucketConfirmations, id, func(old []byte) ([]byte, error) {
			if old != nil {
				return nil, fmt.Errorf("confirmation id %s is taken (random ids collided): repeat the call: %w", id, errkind.Internal)
			}
			return v, nil
		})
		if err != nil {
			return nil, err
		}
	}
	if existing != nil {
		return existing, nil
	}
	s.log.Info("confirmation requested", "id", c.ID, "session", sessionID, "uid", ownerUID, "rule", rule, "reason", reason)
	return c, nil
}

func notFoundConfirmation(id string) error {
	return fmt.Errorf("confirmation %q not found (confirmations.list shows the open ones): %w", id, errkind.NotFound)
}

// update loads confirmation id, lets fn change it (fn returns whether to
// save and the error to report after the write) and returns the saved
// state, as one compare-and-swap of the KV: fn runs again if another
// replica changed the confirmation meanwhile. A state change made before an error (e.g. marking
// an expired one expired) is still written, and an expiry it records is
// reported to the OnExpire hooks.
func (s *ConfirmationStore) update(id string, fn func(c *api.Confirmation, now time.Time) (bool, error)) (*api.Confirmation, error) {
	if !ValidID(id, "cnf_") {
		return nil, notFoundConfirmation(id)
	}
	now := s.now()
	var out *api.Confirmation
	var fnErr error
	expiredNow := false
	ctx, cancel := opContext()
	defer cancel()
	err := s.kv.Update(ctx, bucketConfirmations, id, func(v []byte) ([]byte, error) {
		out, fnErr, expiredNow = nil, nil, false
		if v == nil {
			return nil, notFoundConfirmation(id)
		}
		c, err := decodeConfirmation(v)
		if err != nil {
			return nil, err
		}
		was := c.State
		save, ferr := fn(c, now)
		fnErr, out = ferr, c
		if save {
			expiredNow = was != api.ConfirmationExpired && c.State == api.ConfirmationExpired
			return encodeConfirmation(c)
		}
		return v, nil
	})
	if err != nil {
		return nil, err
	}
	if expiredNow {
		cp := *out
		s.expired(&cp)
	}
	return out, fnErr
}

// expire marks c expired when its time is up, reporting whether it did.
func expire(c *api.Confirmation, now time.Time) bool {
	if effective(c, now) == api.ConfirmationExpired && c.State != api.ConfirmationExpired {
		c.State = api.ConfirmationExpired
		return true
	}
	return false
}

// Get returns confirmation id.
func (s *ConfirmationStore) Get(id string) (*api.Confirmation, error) {
	if !ValidID(id, "cnf_") {
		return nil, notFoundConfirmation(id)
	}
	now := s.now()
	ctx, cancel := opContext()
	defer cancel()
	v, err := s.kv.Get(ctx, bucketConfirmations, id)
	if err != nil {
		return nil, fmt.Errorf("reading confirmation %q: %w", id, err)
	}
	if v == nil {
		return nil, notFoundConfirmation(id)
	}
	c, err := decodeConfirmation(v)
	if err != nil {
		return nil, err
	}
	c.State = effective(c, now)
	return c, nil
}

// Approve approves a pending confirmation on behalf of approver (whom the
// caller has already checked against policy). Anything but an open pending
// request is an error wrapping ErrConfirmationDecided or
// ErrConfirmationExpired.
func (s *ConfirmationStore) Approve(id string, approver api.Peer) (*api.Confirmation, error) {
	c, err := s.update(id, func(c *api.Confirmation, now time.Time) (bool, error) {
		if expire(c, now) {
			return true, errkind.Errorf(ErrConfirmationExpired, "%s expired at %s before it was approved; the host must ask again", c.ID, c.Expires.Format(time.RFC3339))
		}
		if c.State != api.ConfirmationPending {
			return false, errkind.Errorf(ErrConfirmationDecided, "%s is already %s; decisions are final", c.ID, c.State)
		}
		c.State = api.ConfirmationApproved
		c.DecidedBy = &approver
		c.DecidedAt = &now
		return true, nil
	})
	if err == nil {
		s.log.Info("confirmation approved", "id", id, "by", approver.String())
	}
	return c, err
}

// Deny denies a confirmation (pending, or approved and not yet used: an
// approver may withdraw an approval). Denials are final.
func (s *ConfirmationStore) Deny(id string, approver api.Peer) (*api.Confirmation, error) {
	c, err := s.update(id, func(c *api.Confirmation, now time.Time) (bool, error) {
		if expire(c, now) {
			return true, errkind.Errorf(ErrConfirmationExpired, "%s already expired at %s", c.ID, c.Expires.Format(time.RFC3339))
		}
		if c.State != api.ConfirmationPending && c.State != api.ConfirmationApproved {
			return false, errkind.Errorf(ErrConfirmationDecided, "%s is already %s; decisions are final", c.ID, c.State)
		}
		c.State = api.ConfirmationDenied
		c.DecidedBy = &approver
		c.DecidedAt = &now
		return true, nil
	})
	if err == nil {
		s.log.Info("confirmation denied", "id", id, "by", approver.String())
	}
	return c, err
}

// Consume uses an approval for one run: it succeeds only when confirmation
// id is approved, unexpired, belongs to sessionID and was approved for
// exactly digest, and it marks the confirmation used in the same
// transaction, so two concurrent runs cannot both use it. A digest mismatch
// leaves the approval in place (the host may still repeat the approved call).
// A confirmation of another session is "not found".
func (s *ConfirmationStore) Consume(id, sessionID, digest string) error {
	_, err := s.update(id, func(c *api.Confirmation, now time.Time) (bool, error) {
		if c.SessionID != sessionID {
			return false, notFoundConfirmation(id)
		}
		if expire(c, now) {
			return true, errkind.Errorf(ErrConfirmationExpired, "%s expired at %s; repeat the call without confirmation_id to ask for a new approval", c.ID, c.Expires.Format(time.RFC3339))
		}
		switch c.State {
		case api.ConfirmationPending:
			return false, &api.ConfirmationRequiredError{ID: c.ID, Reason: c.Reason, Rule: c.Rule, Digest: c.Digest, Pending: true}
		case api.ConfirmationDenied:
			by := "an approver"
			if c.DecidedBy != nil {
				by = fmt.Sprintf("uid %d", c.DecidedBy.UID)
			}
			return false, errkind.Errorf(ErrConfirmationDenied, "%s was denied by %s; this run may not proceed", c.ID, by)
		case api.ConfirmationUsed:
			return false, errkind.Errorf(ErrConfirmationUsed, "%s was already used by a run; approvals are single-use, so repeat the call without confirmation_id to ask again", c.ID)
		case api.ConfirmationExpired:
			return false, errkind.Errorf(ErrConfirmationExpired, "%s expired; repeat the call without confirmation_id to ask for a new approval", c.ID)
		}
		if subtle.ConstantTimeCompare([]byte(c.Digest), []byte(digest)) != 1 {
			return false, errkind.Errorf(ErrConfirmationMismatch, "%s approved a different request (%s) than this call (%s); repeat exactly the approved call, or call without confirmation_id to ask for a new approval", c.ID, c.Digest, digest)
		}
		c.State = api.ConfirmationUsed
		c.UsedAt = &now
		return true, nil
	})
	if err == nil {
		s.log.Info("confirmation used", "id", id, "session", sessionID)
	}
	return err
}

// ConfirmationFilter selects confirmations for List; zero fields match all.
type ConfirmationFilter struct {
	SessionID string
	// OwnerUID, when set, keeps only requests from that uid.
	OwnerUID *uint32
	// State keeps only confirmations in that (effective) state, e.g.
	// "pending"; "" keeps all.
	State string
}

// List returns the confirmations matching f, oldest first, with expiry
// applied to their state.
func (s *ConfirmationStore) List(f ConfirmationFilter) ([]*api.Confirmation, error) {
	now := s.now()
	out := []*api.Confirmation{}
	ctx, cancel := opContext()
	defer cancel()
	all, err := s.kv.List(ctx, bucketConfirmations)
	if err != nil {
		return nil, fmt.Errorf("listing confirmations: %w", err)
	}
	for _, e := range all {
		c, err := decodeConfirmation(e.Value)
		if err != nil {
			continue
		}
		c.State = effective(c, now)
		if f.SessionID != "" && c.SessionID != f.SessionID {
			continue
		}
		if f.OwnerUID != nil && c.RequestedBy != *f.OwnerUID {
			continue
		}
		if f.State != "" && string(c.State) != f.State {
			continue
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Sweep marks timed-out confirmations expired (telling the OnExpire hooks
// about each) and deletes final ones older than Retention. It returns how
// many it deleted.
func (s *ConfirmationStore) Sweep() (int, error) {
	now := s.now()
	ctx, cancel := opContext()
	defer cancel()
	all, err := s.kv.List(ctx, bucketConfirmations)
	if err != nil {
		return 0, fmt.Errorf("sweeping confirmations: %w", err)
	}
	deleted := 0
	var expiredNow []*api.Confirmation
	for _, e := range all {
		var exp *api.Confirmation
		del := false
		err := s.kv.Update(ctx, bucketConfirmations, e.Key, func(v []byte) ([]byte, error) {
			exp, del = nil, false
			if v == nil {
				return nil, nil
			}
			c, err := decodeConfirmation(v)
			if err != nil {
				del = true
				return nil, nil
			}
			changed := expire(c, now)
			if changed {
				exp = c
			}
			if c.State.Final() {
				end := c.Expires
				for _, t := range []*time.Time{c.DecidedAt, c.UsedAt} {
					if t != nil && t.After(end) {
						end = *t
					}
				}
				if now.Sub(end) >= s.opts.Retention {
					del = true
					return nil, nil
				}
			}
			if changed {
				return encodeConfirmation(c)
			}
			return v, nil
		})
		if err != nil {
			return 0, fmt.Errorf("sweeping confirmations: confirmation %s: %w", e.Key, err)
		}
		if exp != nil {
			expiredNow = append(expiredNow, exp)
		}
		if del {
			deleted++
		}
	}
	s.expired(expiredNow...)
	return deleted, nil
}

// RunSweeper sweeps every interval (default 1m) until ctx is done.
func (s *ConfirmationStore) RunSweeper(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Sweep(); err != nil {
				s.log.Error("sweep failed", "error", err)
			}
		}
	}
}

// requestDigestDomain separates these digests from any other sha256 use.
const requestDigestDomain = "skillbox/request-digest/v1\n"

// RequestDigest hashes the parts of a request that an approval must match,
// conventionally as name/value pairs in a fixed order:
//
//	RequestDigest("skill", name, "skill_digest", d, "script_sha256", h, "args", ..., "env", ..., "limits", ...)
//
// The canonical encoding is SHA-256 over the domain string
// "skillbox/request-digest/v1\n" followed by, for each field in order, its
// byte length as an unsigned LEB128 varint (encoding/binary.AppendUvarint)
// and then its bytes. Length prefixes make the encoding injective: no two
// different field lists produce the same bytes, whatever the fields contain
// (spaces, quotes, NULs), so callers need not escape anything, only encode
// structured values (lists, maps) deterministically themselves (e.g. sorted
// keys). The result is "sha256:" + 64 lower-case hex digits.
func RequestDigest(fields ...string) string {
	h := sha256.New()
	h.Write([]byte(requestDigestDomain))
	var n [binary.MaxVarintLen64]byte
	for _, f := range fields {
		h.Write(binary.AppendUvarint(n[:0], uint64(len(f))))
		h.Write([]byte(f))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
