package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/skills"
)

// ListSkills implements api.Service: every indexed skill matching the
// query, sorted by name (as the index is), model-invocable or not.
func (s *Service) ListSkills(ctx context.Context, caller api.Peer, p api.ListSkillsParams) ([]api.SkillInfo, error) {
	if p.SessionID != "" {
		if _, err := s.session(caller, p.SessionID); err != nil {
			return nil, err
		}
	}
	q := strings.ToLower(p.Query)
	out := []api.SkillInfo{}
	for _, sk := range s.skills.List() {
		if q != "" && !strings.Contains(strings.ToLower(sk.Name+" "+sk.Description+" "+strings.Join(sk.Tags, " ")), q) {
			continue
		}
		tags := sk.Tags
		if tags == nil {
			tags = []string{}
		}
		out = append(out, api.SkillInfo{
			Name: sk.Name, Description: sk.Description, Location: sk.Location, Digest: sk.Digest,
			Tags: tags, ModelInvocable: !sk.DisableModelInvocation, UserInvocable: sk.UserInvocable(),
			Tokens: skills.CatalogEntryTokens(sk), BodyTokens: skills.EstimateTokens(sk.Body),
		})
	}
	return out, nil
}

func (s *Service) receipt(ses *store.Session) *api.LoadResult {
	res := &api.LoadResult{ActiveSkills: []api.ActiveSkill{}}
	loaded := map[string]bool{}
	for _, a := range ses.Active {
		loaded[a.Name] = true
	}
	for _, a := range ses.Active {
		sk, err := s.skills.Get(a.Name)
		if err != nil {
			res.Hints = append(res.Hints, fmt.Sprintf("skill %q is loaded but no longer indexed; unload it", a.Name))
			continue
		}
		res.ActiveSkills = append(res.ActiveSkills, api.ActiveSkill{
			Name: sk.Name, Location: sk.Location, RootDir: sk.Dir, Digest: a.Digest, Properties: sk.Properties,
			Tokens: skills.EstimateTokens(sk.Body),
		})
		for _, r := range sk.Requires {
			if !loaded[r] {
				res.Hints = append(res.Hints, fmt.Sprintf("skill %q requires %q, which is not loaded; load it too if the task needs it", sk.Name, r))
			}
		}
	}
	return res
}

// LoadSkills implements api.Service.
func (s *Service) LoadSkills(ctx context.Context, caller api.Peer, p api.LoadParams) (*api.LoadResult, error) {
	if _, err := s.session(caller, p.SessionID); err != nil {
		return nil, err
	}
	if p.Mode == "" {
		p.Mode = api.LoadReplace
	}
	if p.Mode != api.LoadReplace && p.Mode != api.LoadAdd {
		return nil, errkind.Errorf(errkind.InvalidParams, "mode %q: use \"replace\" (default) or \"add\"", p.Mode)
	}
	if len(p.Names) == 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "names is empty: give the skills to load, see skills.list")
	}
	var found []*skills.Skill
	var missing []string
	for _, n := range p.Names {
		if err := skills.ValidName(n); err != nil {
			return nil, errkind.Wrap(errkind.InvalidParams, err)
		}
		sk, err := s.skills.Get(n)
		if errors.Is(err, skills.ErrConflict) {
			// Two skill directories claim the name: neither is loaded,
			// whichever the policy for the name was written for.
			return nil, errkind.Wrap(errkind.Denied, err)
		}
		if err != nil {
			missing = append(missing, n)
			continue
		}
		if sk.Name != skills.NormalizeName(n) {
			// Policy, locks and approvals go by the name: never load a
			// skill under a name other than its own.
			return nil, errkind.Errorf(errkind.Internal, "asked for skill %q, the index returned %q (%s)", n, sk.Name, sk.Dir)
		}
		found = append(found, sk)
	}
	if len(missing) > 0 {
		return nil, errkind.Errorf(errkind.NotFound, "no skill named %s: call skills.list to see the available names", quoteList(missing))
	}
	for _, sk := range found {
		if err := s.checkLock(ctx, caller, api.MethodSkillsLoad, p.SessionID, sk, s.cfg.For(sk.Name).Lock); err != nil {
			return nil, err
		}
	}
	// Keep a copy of each version loaded, so that what is rendered and run
	// later is this version even if the files change (see pinnedBody).
	if s.engine != nil && s.engine.Pins() != nil {
		for _, sk := range found {
			if _, err := s.engine.Pins().Pin(sk); err != nil {
				s.log.Warn("could not keep a copy of the loaded skill version", "skill", sk.Name, "digest", sk.Digest, "error", err)
			}
		}
	}
	maxActive := s.cfg.Daemon.MaxActiveSkills
	var sess *store.Session
	err := s.sessions.Update(p.SessionID, caller.UID, func(ses *store.Session) error {
		var next []store.ActiveSkill
		if p.Mode == api.LoadAdd {
			next = append(next, ses.Active...)
		}
		for _, sk := range found {
			kept := next[:0]
			for _, a := range next {
				if a.Name != sk.Name {
					kept = append(kept, a)
				}
			}
			next = append(kept, store.ActiveSkill{Name: sk.Name, Digest: sk.Digest, Dir: sk.Dir, LoadedAt: time.Now().UTC()})
		}
		if maxActive > 0 && len(next) > maxActive {
			return errkind.Errorf(errkind.LimitExceeded, "%d skills would be active, the limit is %d: unload some (skills.unload) or load with mode \"replace\"", len(next), maxActive)
		}
		ses.Active = next
		sess = ses
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.engine.WarmSkills(found)
	for _, sk := range found {
		r := base(ctx, caller, api.MethodSkillsLoad, audit.EventSkillLoad, p.SessionID)
		r.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
		if err := s.record(ctx, r); err != nil {
			return nil, err
		}
	}
	res := s.receipt(sess)
	s.loadDeps(found, res)
	return res, nil
}

// UnloadSkills implements api.Service.
func (s *Service) UnloadSkills(ctx context.Context, caller api.Peer, p api.UnloadParams) (*api.LoadResult, error) {
	if _, err := s.session(caller, p.SessionID); err != nil {
		return nil, err
	}
	if !p.All && len(p.Names) == 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "give names or all: true")
	}
	var removed []store.ActiveSkill
	var sess *store.Session
	err := s.sessions.Update(p.SessionID, caller.UID, func(ses *store.Session) error {
		removed = nil // fn runs again when another replica changed the session
		drop := map[string]bool{}
		for _, n := range p.Names {
			drop[n] = true
		}
		var kept []store.ActiveSkill
		for _, a := range ses.Active {
			if p.All || drop[a.Name] {
				removed = append(removed, a)
				delete(drop, a.Name)
			} else {
				kept = append(kept, a)
			}
		}
		if len(drop) > 0 {
			var names []string
			for n := range drop {
				names = append(names, n)
			}
			return errkind.Errorf(errkind.NotFound, "%s not loaded in this session", quoteList(names))
		}
		ses.Active = kept
		sess = ses
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, a := range removed {
		r := base(ctx, caller, api.MethodSkillsUnload, audit.EventSkillUnload, p.SessionID)
		r.Skill = &audit.SkillRef{Name: a.Name, Digest: a.Digest}
		s.record(ctx, r)
	}
	return s.receipt(sess), nil
}

// activeSkill resolves which loaded skill a call is about: the named one, or
// the most recently loaded. It refuses a skill whose files changed since load.
func (s *Service) activeSkill(ses *store.Session, name string) (*skills.Skill, error) {
	if len(ses.Active) == 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "no skill is loaded in this session: call skills.load first")
	}
	var a *store.ActiveSkill
	if name == "" {
		a = &ses.Active[len(ses.Active)-1]
	} else {
		for i := range ses.Active {
			if ses.Active[i].Name == name {
				a = &ses.Active[i]
			}
		}
		if a == nil {
			return nil, errkind.Errorf(errkind.InvalidParams, "skill %q is not loaded in this session: call skills.load with it first", name)
		}
	}
	sk, err := s.skills.Get(a.Name)
	if errors.Is(err, skills.ErrConflict) {
		return nil, errkind.Errorf(errkind.Denied, "skill %q was loaded, but now %w", a.Name, err)
	}
	if err != nil {
		return nil, errkind.Errorf(errkind.NotFound, "skill %q is no longer available: unload it", a.Name)
	}
	if sk.Digest != a.Digest {
		return nil, errkind.Errorf(errkind.InvalidParams, "skill %q changed on disk since it was loaded (%s → %s): call skills.load again to use the new version", a.Name, a.Digest, sk.Digest)
	}
	if a.Dir != "" && sk.Dir != a.Dir {
		// Same bytes, other directory (a later root now provides the
		// name): still another skill than the one loaded.
		return nil, errkind.Errorf(errkind.InvalidParams, "skill %q now comes from %s, not %s where it was loaded from: call skills.load again to use it", a.Name, sk.Dir, a.Dir)
	}
	return sk, nil
}

// ReadSkillFile implements api.Service: a path-confined, size-capped read
// of a loaded skill's file, after policy allowed skills.read for it.
func (s *Service) ReadSkillFile(ctx context.Context, caller api.Peer, p api.ReadParams) (*api.ReadResult, error) {
	const method = api.MethodSkillsRead
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	sk, err := s.activeSkill(ses, p.Skill)
	if err != nil {
		return nil, err
	}
	// The decision is recorded with the read's outcome: one by one for a
	// deny or a refused read, within the uid's budget otherwise (readAudit).
	dec, drec := s.decision(sk, s.cfg.For(sk.Name), method, nil, *base(ctx, caller, method, audit.EventDecision, p.SessionID))
	if dec.Effect == policy.EffectDeny {
		if err := s.record(ctx, drec); err != nil {
			return nil, err
		}
		return nil, api.MarkAudited(errkind.Errorf(errkind.Denied, "%s for skill %q is denied by %s: %s", method, sk.Name, dec.Rule, dec.Why()))
	}
	rec := base(ctx, caller, method, audit.EventSkillRead, p.SessionID)
	rec.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
	fc, err := skills.ReadFile(sk.Dir, p.Path, skills.ReadOptions{Offset: p.Offset, Length: p.Length, MaxBytes: s.cfg.Skills.MaxReadBytes})
	if err != nil {
		rec.Read = &audit.ReadInfo{Path: p.Path, Offset: p.Offset, Length: p.Length}
		rec.Outcome, rec.Error = audit.OutcomeRefused, err.Error()
		if aerr := s.record(ctx, drec); aerr != nil {
			return nil, aerr
		}
		if aerr := s.record(ctx, rec); aerr != nil {
			return nil, aerr
		}
		return nil, api.MarkAudited(readError(err))
	}
	rec.Read = &audit.ReadInfo{Path: fc.Path, Offset: p.Offset, Length: p.Length, Bytes: fc.Size, Served: servedBytes(fc), SHA256: fc.SHA256, Truncated: fc.Truncated}
	rec.Outcome = audit.OutcomeOK
	if s.allowRead(caller, sk.Name, fc.Path, rec.Read.Served) {
		if err := s.record(ctx, drec); err != nil {
			return nil, err
		}
		if err := s.record(ctx, rec); err != nil {
			return nil, err
		}
	} else if err := s.journal.Check(); err != nil {
		// Counted, not recorded: the log must still be writable, or the
		// read is refused like any audited call (fail closed).
		return nil, err
	}
	return &api.ReadResult{Skill: sk.Name, Path: fc.Path, Size: fc.Size, SHA256: fc.SHA256, Encoding: fc.Encoding, Content: fc.Content, Truncated: fc.Truncated,
		Tokens: skills.EstimateTokens(fc.Content)}, nil
}

// servedBytes is how many bytes of the file a read answer carries.
func servedBytes(fc *skills.FileContent) int64 {
	if fc.Encoding == "base64" {
		n := len(fc.Content)
		return int64(n/4*3 - (n - len(strings.TrimRight(fc.Content, "="))))
	}
	return int64(len(fc.Content))
}

func readError(err error) error {
	if errors.Is(err, skills.ErrNotFound) {
		return errkind.Wrap(errkind.NotFound, err)
	}
	return errkind.Wrap(errkind.InvalidParams, err)
}
