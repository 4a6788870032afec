package service

import (
	"context"
	"errors"
	"os"

	"github.com/skillbox/skillbox/runtime/checkpoint"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
)

// Sessions that live (isolation = "session"): pause, resume and fork of a
// session's sandboxes, for the session's owner; the engine's keeper does
// the work and audits each checkpoint, restore and fork.

// PauseSession implements api.Service.
func (s *Service) PauseSession(ctx context.Context, caller api.Peer, p api.SessionParams) (*api.PauseSessionResult, error) {
	if _, err := s.session(caller, p.SessionID); err != nil {
		return nil, err
	}
	infos, err := s.engine.Sessions().Pause(ctx, p.SessionID)
	res := &api.PauseSessionResult{SessionID: p.SessionID, Sandboxes: []api.PausedSandbox{}}
	for _, i := range infos {
		res.Sandboxes = append(res.Sandboxes, api.PausedSandbox{Sandbox: i.Sandbox, Checkpoint: i.Checkpoint, Digest: i.Digest, Bytes: i.Bytes, DurationMS: i.Duration.Milliseconds()})
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// ResumeSession implements api.Service.
func (s *Service) ResumeSession(ctx context.Context, caller api.Peer, p api.ResumeSessionParams) (*api.ResumeSessionResult, error) {
	if _, err := s.session(caller, p.SessionID); err != nil {
		return nil, err
	}
	boxes, err := s.engine.Sessions().Resume(ctx, p.SessionID, p.Fresh)
	if err != nil {
		return nil, err
	}
	if boxes == nil {
		boxes = []string{}
	}
	return &api.ResumeSessionResult{SessionID: p.SessionID, Sandboxes: boxes, Fresh: p.Fresh}, nil
}

// ForkSession implements api.Service: the new session is the caller's,
// with the source's active skills (the same versions), a copy of its own
// workspace, and its sandboxes restored from checkpoints of the source's.
func (s *Service) ForkSession(ctx context.Context, caller api.Peer, p api.SessionParams) (*api.ForkSessionResult, error) {
	src, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	ses, err := s.sessions.Create(caller.UID)
	if err != nil {
		return nil, err
	}
	rec := base(ctx, caller, api.MethodSessionsFork, audit.EventSessionCreate, ses.ID)
	rec.Detail = map[string]string{"forked_from": src.ID}
	if err := s.record(ctx, rec); err != nil {
		_ = s.sessions.Close(ses.ID, caller.UID)
		return nil, err
	}
	fail := func(err error) (*api.ForkSessionResult, error) {
		s.engine.Sessions().CloseSession(context.WithoutCancel(ctx), ses.ID, "fork failed")
		s.removeSessionWorkspace(ses.ID)
		_ = s.sessions.Close(ses.ID, caller.UID)
		return nil, err
	}
	if err := s.sessions.Update(ses.ID, caller.UID, func(n *store.Session) error {
		n.Active = append(n.Active[:0], src.Active...)
		return nil
	}); err != nil {
		return fail(err)
	}
	if from, _ := s.sessionWorkspaceDir(src.ID, false); from != "" {
		// The copy grows the uid's session workspaces by what the
		// source holds: taken from the budget before a byte is copied.
		res, err := s.reserveFork(from, ses.ID, caller.UID)
		if err != nil {
			return fail(err)
		}
		to, err := s.sessionWorkspaceDir(ses.ID, true)
		if err == nil {
			_ = os.Remove(to) // CopyTree makes it
			_, err = checkpoint.CopyTree(from, to)
		}
		if err != nil {
			res.Done(0)
			return fail(errkind.Errorf(errkind.Unavailable, "copy the session's workspace for its fork: %w", err))
		}
		res.Done(workspaceBytes(to))
	}
	boxes, err := s.engine.Sessions().Fork(ctx, src.ID, ses.ID)
	if err != nil {
		return fail(err)
	}
	if boxes == nil {
		boxes = []string{}
	}
	return &api.ForkSessionResult{SessionID: ses.ID, From: src.ID, Sandboxes: boxes}, nil
}

// reserveFork takes what the session workspace from holds from the budget
// of the fork's (dst, owned by uid), before it is copied; a copy that
// would take the uid's or the daemon's workspaces over their budget is
// refused (errkind.LimitExceeded) with what they hold.
func (s *Service) reserveFork(from, dst string, uid uint32) (*workspace.Reservation, error) {
	acct, err := s.workspaceAccount(dst, uid)
	if err != nil {
		return nil, err
	}
	ws, err := workspace.Open(from)
	if err != nil {
		return nil, err
	}
	n, _, err := ws.Usage()
	ws.Close()
	if err != nil {
		return nil, err
	}
	res, err := acct.Reserve(n)
	if errors.Is(err, errkind.LimitExceeded) {
		return nil, errkind.Errorf(errkind.LimitExceeded, "copying the session's workspace (%d bytes) into its fork %s", n, errkind.Detail(err, errkind.LimitExceeded))
	}
	return res, err
}

// workspaceBytes is what the workspace dir holds by a walk (0 when it
// cannot be walked: the next walk of a write-back counts it again).
func workspaceBytes(dir string) int64 {
	ws, err := workspace.Open(dir)
	if err != nil {
		return 0
	}
	defer ws.Close()
	n, _, err := ws.Usage()
	if err != nil {
		return 0
	}
	return n
}
