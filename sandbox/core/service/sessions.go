package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/skills"
)

func (s *Service) session(caller api.Peer, id string) (*store.Session, error) {
	if s.sessions == nil {
		return nil, errkind.Errorf(errkind.Unavailable, "this skillbox keeps no sessions (use the daemon)")
	}
	if id == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "session_id is required: call sessions.create first")
	}
	ses, err := s.sessions.Get(id, caller.UID)
	if err != nil {
		// The store's not-found says why (unknown, another uid's, expired)
		// without telling which; anything else is skillbox's problem and
		// must not pass for a missing session.
		if errors.Is(err, errkind.NotFound) {
			return nil, err
		}
		return nil, errkind.Errorf(errkind.Internal, "reading session %q: %w", id, err)
	}
	return ses, nil
}

// CreateSession implements api.Service.
func (s *Service) CreateSession(ctx context.Context, caller api.Peer, p api.CreateSessionParams) (*api.CreateSessionResult, error) {
	if s.sessions == nil {
		return nil, errkind.Errorf(errkind.Unavailable, "this skillbox keeps no sessions (use the daemon)")
	}
	bound, err := s.boundSkills(p)
	if err != nil {
		return nil, err
	}
	ses, err := s.sessions.Create(caller.UID)
	if err != nil {
		return nil, err
	}
	if err := s.record(ctx, base(ctx, caller, api.MethodSessionsCreate, audit.EventSessionCreate, ses.ID)); err != nil {
		// Fail closed: no session the log does not know of is left behind.
		if cerr := s.sessions.Close(ses.ID, caller.UID); cerr != nil {
			s.log.Error("cannot remove a session whose creation was not audited", "session", ses.ID, "error", cerr)
		}
		return nil, err
	}
	if len(bound) > 0 {
		if err := s.loadBound(ctx, caller, ses.ID, p.Agent, bound); err != nil {
			return nil, err
		}
	}
	return &api.CreateSessionResult{SessionID: ses.ID}, nil
}

// CloseSession implements api.Service.
func (s *Service) CloseSession(ctx context.Context, caller api.Peer, p api.SessionParams) (*api.CloseSessionResult, error) {
	if _, err := s.session(caller, p.SessionID); err != nil {
		return nil, err
	}
	if err := s.sessions.Close(p.SessionID, caller.UID); err != nil {
		return nil, err
	}
	s.grants.forget(p.SessionID)
	s.engine.Sessions().CloseSession(ctx, p.SessionID, "session closed")
	s.removeSessionWorkspace(p.SessionID)
	s.record(ctx, base(ctx, caller, api.MethodSessionsClose, audit.EventSessionClose, p.SessionID))
	return &api.CloseSessionResult{Closed: true}, nil
}

// instructionsRule is the per-call rule the runtime spec asks hosts to give
// their model: skills are used only after loading them.
const instructionsRule = `You can use Agent Skills. The skills available are listed in <available_skills>. ` +
	`Before you use a skill, load it with skills.load; its instructions then appear in <active_skills>. ` +
	`Read its files with skills.read and run its scripts with skills.run_script; do not guess their contents.`

// Instructions implements api.Service.
func (s *Service) Instructions(ctx context.Context, caller api.Peer, p api.SessionParams) (*api.InstructionsResult, error) {
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	available := s.catalog()
	var act []*skills.Skill
	var notes []string
	for _, a := range ses.Active {
		sk, err := s.skills.Get(a.Name)
		if err != nil {
			notes = append(notes, fmt.Sprintf("Skill %q is loaded but no longer available; unload it with skills.unload.", a.Name))
			continue
		}
		if sk.Digest != a.Digest {
			notes = append(notes, fmt.Sprintf("Skill %q changed on disk since it was loaded; its files cannot be read or run until it is loaded again with skills.load.", a.Name))
			// Render the version the receipt names, never the edited file.
			body, ok := s.pinnedBody(a.Digest)
			if !ok {
				notes = append(notes, fmt.Sprintf("The instructions of skill %q as loaded are not available; load it again to see the current ones.", a.Name))
				continue
			}
			pinned := *sk
			pinned.Body = body
			sk = &pinned
		}
		act = append(act, sk)
	}
	active := skills.RenderActive(act)
	mounts, mountText := skillMounts(act)
	text := instructionsRule + "\n\n" + available + "\n\n" + active + mountText
	if len(notes) > 0 {
		text += "\n" + strings.Join(notes, "\n") + "\n"
	}
	return &api.InstructionsResult{Instructions: text, AvailableSkills: available, ActiveSkills: active, SkillMounts: mounts}, nil
}

// SnapshotLookup finds the pinned copy of a skill version by digest; the
// SnapshotStore implements it.
type SnapshotLookup interface {
	Lookup(digest string) (string, bool)
}

// snapshotOf is the pinned copy of the version with digest, if the
// pinner keeps one.
func (s *Service) snapshotOf(digest string) (string, bool) {
	if s.engine == nil {
		return "", false
	}
	l, ok := s.engine.Pins().(SnapshotLookup)
	if !ok {
		return "", false
	}
	return l.Lookup(digest)
}

// pinnedBody is the SKILL.md body of the pinned copy of the version with
// digest, if the pinner keeps one.
func (s *Service) pinnedBody(digest string) (string, bool) {
	dir, ok := s.snapshotOf(digest)
	if !ok {
		return "", false
	}
	f, err := skills.OpenInRoot(dir, "SKILL.md")
	if err != nil {
		return "", false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSkillMDBytes))
	if err != nil {
		return "", false
	}
	doc, err := skills.Parse(data)
	if err != nil {
		return "", false
	}
	return doc.Body, true
}

// maxSkillMDBytes bounds a SKILL.md read back from a pinned copy.
const maxSkillMDBytes = 4 << 20
