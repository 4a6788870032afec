package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/skills"
)

// Pinned skills: a security team approves skill versions, not names. When
// a policy rule sets require_lock for a skill, it loads and runs only while
// its current digest is the one the lock file (skills.lock_file) pins.

// Audit events of the lock.
const (
	EventSkillLock    = "skills.lock"    // skill: pinned at its digest; detail: previous digest, lock file
	EventLockRefused  = "skills.refused" // skill: refused because its digest is not the pinned one
	lockReadCacheSpan = time.Second
)

// lockCache keeps the lock file read at most once a second.
type lockCache struct {
	mu    sync.Mutex
	path  string
	read  time.Time
	mtime time.Time
	lock  *skills.Lock
	err   error
}

func (c *lockCache) get(path string) (*skills.Lock, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, statErr := os.Stat(path)
	if c.path == path && c.lock != nil && statErr == nil && st.ModTime().Equal(c.mtime) && time.Since(c.read) < lockReadCacheSpan {
		return c.lock, c.err
	}
	l, err := skills.ReadLock(path)
	if err != nil && errors.Is(err, os.ErrNotExist) {
		err = nil // an empty lock: nothing is pinned
	}
	c.path, c.read, c.lock, c.err = path, time.Now(), l, err
	if statErr == nil {
		c.mtime = st.ModTime()
	}
	return l, err
}

func (c *lockCache) forget() {
	c.mu.Lock()
	c.lock = nil
	c.mu.Unlock()
}

// checkLock refuses a skill whose current version is not pinned when
// policy requires a lock for it (lock, the skill's policy.SkillPolicy.Lock);
// the refusal is audited.
func (s *Service) checkLock(ctx context.Context, caller api.Peer, method, sessionID string, sk *skills.Skill, lock policy.Ruled[bool]) error {
	required, rule := lock.Value, lock.Rule
	if !required {
		return nil
	}
	path := s.cfg.Skills.LockFile
	l, err := s.locks.get(path)
	if err == nil {
		err = l.Check(sk, path)
	} else {
		err = errkind.Wrap(skills.ErrNotLocked, err)
	}
	if err == nil {
		return nil
	}
	r := base(ctx, caller, method, EventLockRefused, sessionID)
	r.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest, Location: sk.Location}
	r.Outcome, r.Error = audit.OutcomeDenied, err.Error()
	r.Detail = map[string]string{"rule": rule, "lock_file": path}
	if l != nil {
		if e, ok := l.Skills[sk.Name]; ok {
			r.Detail["locked_digest"] = e.Digest
		}
	}
	if aerr := s.record(ctx, r); aerr != nil {
		return aerr
	}
	return api.MarkAudited(errkind.Errorf(errkind.Denied, "%w (policy %s requires a pinned version)", err, rule))
}

// LockSkills implements api.Service: an approver pins the current
// versions of the named skills (all indexed skills when none are named) in
// the lock file, each pin audited.
func (s *Service) LockSkills(ctx context.Context, caller api.Peer, p api.LockParams) (*api.LockResult, error) {
	const method = api.MethodSkillsLock
	if !s.IsApprover(caller) {
		r := base(ctx, caller, method, EventSkillLock, "")
		r.Outcome, r.Error = audit.OutcomeRefused, "not an approver"
		err := errkind.Errorf(errkind.Denied, "uid %d is not an approver: the config's daemon.approvers names who may pin skill versions", caller.UID)
		if s.record(ctx, r) == nil {
			err = api.MarkAudited(err)
		}
		return nil, err
	}
	var list []*skills.Skill
	if len(p.Names) == 0 {
		list = s.skills.List()
	}
	for _, n := range p.Names {
		sk, err := s.skills.Get(n)
		if err != nil {
			return nil, err
		}
		list = append(list, sk)
	}
	unlock, err := s.lockSkills(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.pin(ctx, caller, method, "", list)
}

// pin writes sk's versions to the lock file and audits each pin. Called
// with lockSkills held.
func (s *Service) pin(ctx context.Context, caller api.Peer, method, proposal string, list []*skills.Skill) (*api.LockResult, error) {
	path := s.cfg.Skills.LockFile
	l, err := skills.ReadLock(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, errkind.Wrap(errkind.Internal, err)
	}
	who := approverName(caller)
	now := time.Now().UTC()
	res := &api.LockResult{LockFile: path, Pinned: []api.PinnedSkill{}}
	for _, sk := range list {
		prev := l.Skills[sk.Name].Digest
		if err := l.Pin(sk, who, now); err != nil {
			return nil, errkind.Wrap(errkind.Internal, err)
		}
		res.Pinned = append(res.Pinned, api.PinnedSkill{Name: sk.Name, Digest: sk.Digest, Previous: prev, ApprovedBy: who, ApprovedAt: now})
	}
	if err := s.journal.Check(); err != nil {
		return nil, err
	}
	if err := l.Write(path); err != nil {
		return nil, errkind.Wrap(errkind.Internal, err)
	}
	s.locks.forget()
	s.keepLocked(l, path, list)
	for _, pn := range res.Pinned {
		r := base(ctx, caller, method, EventSkillLock, "")
		r.Skill = &audit.SkillRef{Name: pn.Name, Digest: pn.Digest}
		r.Outcome = audit.OutcomeOK
		r.Detail = map[string]string{"lock_file": path, "approved_by": who}
		if pn.Previous != "" {
			r.Detail["previous_digest"] = pn.Previous
		}
		if proposal != "" {
			r.Detail["proposal"] = proposal
		}
		if err := s.record(ctx, r); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// approverName is how a lock names who approved: the user name, or the uid.
func approverName(p api.Peer) string {
	if name := lookupUser(p.UID); name != "" {
		return name
	}
	return "uid " + strconv.FormatUint(uint64(p.UID), 10)
}

func lookupUser(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return ""
}

// lockSkills takes the lock of lock file writes and proposal applies: the
// replicas' shared one when the store has one, else lockMu.
func (s *Service) lockSkills(ctx context.Context) (func(), error) {
	if s.shared == nil {
		s.lockMu.Lock()
		return s.lockMu.Unlock, nil
	}
	unlock, err := s.shared.Lock(ctx, "skills")
	if err != nil {
		return nil, errkind.Wrap(errkind.Unavailable, err)
	}
	return unlock, nil
}

// keepLocked keeps the pinned versions' files in the lock's content store
// (and drops those no pin names any more), so a confirmation can show a
// later change line by line. A failure only costs that: the comparison
// then says the locked content is not kept.
func (s *Service) keepLocked(l *skills.Lock, path string, list []*skills.Skill) {
	store := skills.LockContentDir(path)
	for _, sk := range list {
		if err := skills.KeepLockedFiles(store, sk.Dir, l.Skills[sk.Name].Files); err != nil {
			s.log.Warn("cannot keep a pinned skill's files; confirmations will show its changes by hash only", "skill", sk.Name, "error", err)
		}
	}
	if err := l.PruneContent(store); err != nil {
		s.log.Warn("cannot prune the lock's content store", "dir", store, "error", err)
	}
}

// lockDetails adds to a confirmation's details how the run's skill stands
// with the lock (skills.CompareWithLock): "lock" always, and when it
// differs the changed files, the diff and what is not shown.
func (s *Service) lockDetails(d map[string]string, p *Plan) {
	if p.Code() != nil {
		return
	}
	sk := p.Request().Skill
	path := s.cfg.Skills.LockFile
	l, err := s.locks.get(path)
	if err != nil {
		d["lock"] = "unreadable: " + err.Error()
		return
	}
	sources := []skills.LockedFiles{skills.ContentStore(skills.LockContentDir(path))}
	if e, ok := l.Skills[sk.Name]; ok && e.Digest != sk.Digest {
		if dir, ok := s.snapshotOf(e.Digest); ok {
			sources = append(sources, skills.VersionDir(dir))
		}
	}
	c, err := skills.CompareWithLock(l, path, sk, p.Script(), sources...)
	if err != nil {
		d["lock"] = fmt.Sprintf("%s, but the skill's files could not be compared: %v", skills.LockDiffers, err)
		return
	}
	switch c.Status {
	case skills.LockNone:
		d["lock"] = fmt.Sprintf("%s: the lock file %s does not pin skill %q", c.Status, path, sk.Name)
		return
	case skills.LockMatches:
		d["lock"] = fmt.Sprintf("%s: %s pins %s (approved by %s at %s)", c.Status, path, c.Locked.Digest, c.Locked.ApprovedBy, c.Locked.ApprovedAt.Format(time.RFC3339))
		return
	}
	d["lock"] = fmt.Sprintf("%s: %s pins %s (approved by %s at %s), the skill is now %s", c.Status, path, c.Locked.Digest, c.Locked.ApprovedBy, c.Locked.ApprovedAt.Format(time.RFC3339), c.CurrentDigest)
	lines := make([]string, len(c.Changes))
	for i, ch := range c.Changes {
		lines[i] = fmt.Sprintf("%s %s", ch.Change, ch.Path)
	}
	if len(lines) > 0 {
		d["lock_changes"] = strings.Join(lines, "\n")
	}
	if c.Diff != "" {
		d[api.DetailLockDiff] = c.Diff
	}
	if len(c.Notes) > 0 {
		d["lock_notes"] = strings.Join(c.Notes, "\n")
	}
}
