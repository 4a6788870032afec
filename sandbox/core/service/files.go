package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
)

// Session workspaces: a directory the daemon keeps for each session under
// Options.SessionWorkspaces (state_dir/workspaces/SESSION), root's and
// 0700, so no other local user reaches a session's files. It comes into
// being with the first file the files API writes there, or with a run
// that names it (workspace "session"); from then on it is the workspace
// of every run of the session that names none, so what was put there once
// is seen by every later run. A session that never uses it keeps the
// fresh /work of each run. It counts against the quota
// (daemon.workspace_quota), lives as long as the session (daemon restarts
// included) and goes with it.

// SessionWorkspaceName is the workspace a call names to work in its
// session's own (api.WorkspaceParams.Workspace).
const SessionWorkspaceName = "session"

// sessionIDRE is what a session id must look like to name a directory.
var sessionIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// sessionWorkspaceDir is ses's workspace directory, made when missing if
// create is set; "" when this service keeps none, or when it is missing
// and create is not set.
func (s *Service) sessionWorkspaceDir(id string, create bool) (string, error) {
	if s.sessionWS == "" {
		return "", nil
	}
	if !sessionIDRE.MatchString(id) {
		return "", errkind.Errorf(errkind.Internal, "session id %q cannot name a workspace directory", id)
	}
	if !create {
		if _, err := os.Lstat(filepath.Join(s.sessionWS, id)); err != nil {
			return "", nil
		}
		return filepath.Join(s.sessionWS, id), nil
	}
	// Both root's and 0700, made as the run dirs are (a link or another
	// uid's directory in the way is refused, one found open is closed).
	if err := oci.MakePrivateDir(s.sessionWS, "session workspaces"); err != nil {
		return "", errkind.Wrap(errkind.Unavailable, err)
	}
	dir := filepath.Join(s.sessionWS, id)
	if err := oci.MakePrivateDir(dir, "the session's workspace"); err != nil {
		return "", errkind.Wrap(errkind.Unavailable, err)
	}
	return dir, nil
}

// removeSessionWorkspace removes a closed or expired session's workspace,
// and gives back what it held of its uid's and the daemon's budget.
func (s *Service) removeSessionWorkspace(id string) {
	if s.sessionWS == "" || !sessionIDRE.MatchString(id) {
		return
	}
	s.wsOpen.drop(id)
	if err := os.RemoveAll(filepath.Join(s.sessionWS, id)); err != nil {
		s.log.Warn("removing a session's workspace failed", "session", id, "error", err)
	}
	s.wsBudget.Remove(id)
}

// workspaceAccount is session id's part of the workspace budget, owned by
// uid; nil when this service keeps no session workspaces.
func (s *Service) workspaceAccount(id string, uid uint32) (*workspace.Account, error) {
	if s.sessionWS == "" {
		return nil, nil
	}
	return s.wsBudget.Account(id, uid)
}

// recountWorkspace sets what session id's workspace holds in the budget
// from a walk of it (at start, for the sessions that survived a
// restart). A walk that fails (a tree of more entries than a walk
// counts) charges the session its whole quota.
func (s *Service) recountWorkspace(id string) {
	uid, ok := s.sessions.Owner(id)
	if !ok {
		return
	}
	acct, err := s.workspaceAccount(id, uid)
	if err != nil || acct == nil {
		return
	}
	gen := acct.Gen()
	bytes, err := func() (int64, error) {
		ws, err := workspace.Open(filepath.Join(s.sessionWS, id))
		if err != nil {
			return 0, err
		}
		defer ws.Close()
		n, _, err := ws.Usage()
		return n, err
	}()
	if err != nil {
		s.log.Warn("counting a session's workspace failed: it is charged its quota", "session", id, "quota", s.wsQuota, "error", err)
		bytes = s.wsQuota
	}
	acct.Sync(gen, bytes)
}

// SweepSessionWorkspaces removes the workspaces of sessions that no longer
// exist (they expired while the daemon was down) and counts what those of
// the sessions that do hold into the per-uid and total budget (each walk
// bounded as workspace.Usage bounds it); the daemon calls it at start,
// before it serves.
func (s *Service) SweepSessionWorkspaces() error {
	if s.sessionWS == "" || s.sessions == nil {
		return nil
	}
	ents, err := os.ReadDir(s.sessionWS)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("session workspaces: %w", err)
	}
	for _, e := range ents {
		if !s.sessions.Exists(e.Name()) {
			s.removeSessionWorkspace(e.Name())
			continue
		}
		if e.IsDir() && sessionIDRE.MatchString(e.Name()) {
			s.recountWorkspace(e.Name())
		}
	}
	return nil
}

// sessionWorkspaceRequest is the workspace of a session's run that names
// none (named: that names "session"): the session's own once it exists
// (named: made now), else none.
func (s *Service) sessionWorkspaceRequest(sessionID string, inputs []string, named bool) (*runner.WorkspaceRequest, error) {
	dir, err := s.sessionWorkspaceDir(sessionID, named)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		switch {
		case named && s.sessionWS == "":
			return nil, errkind.Errorf(errkind.InvalidParams, "this skillbox keeps no session workspaces (use the daemon), so workspace %q names nothing", SessionWorkspaceName)
		case len(inputs) > 0:
			return nil, errkind.Errorf(errkind.InvalidParams, "inputs name paths of a workspace, and this session has none yet: upload files with workspace.write, or give the directory in workspace")
		}
		return nil, nil
	}
	return &runner.WorkspaceRequest{Dir: dir, Kind: api.WorkspaceSession, Inputs: inputs, Quota: s.wsQuota}, nil
}

// openSessionWorkspace opens the caller's session's workspace for the
// files API, making it when create is set (a write); nil when it does not
// exist yet. The workspace stays open for the session's next calls
// (sessionWorkspaces); call release when done with it.
func (s *Service) openSessionWorkspace(caller api.Peer, sessionID string, create bool) (ws *workspace.Workspace, release func(), err error) {
	if _, err := s.session(caller, sessionID); err != nil {
		return nil, nil, err
	}
	if s.sessionWS == "" {
		return nil, nil, errkind.Errorf(errkind.Unavailable, "this skillbox keeps no session workspaces (use the daemon)")
	}
	return s.wsOpen.acquire(sessionID, func() (*workspace.Workspace, error) {
		dir, err := s.sessionWorkspaceDir(sessionID, create)
		if err != nil || dir == "" {
			return nil, err
		}
		return workspace.Open(dir)
	})
}

// sessionOfRun is the session whose workspace plan's run works in ("":
// none), whose open workspace the run's write-back makes stale.
func (s *Service) sessionOfRun(o RunOptions, plan *Plan) string {
	w := plan.Workspace()
	switch {
	case w == nil || s.sessionWS == "":
		return ""
	case w.Request.Kind == api.WorkspaceSession:
		return o.SessionID
	}
	for _, dir := range []string{w.Dir, w.Request.Dir} {
		// A host workspace naming a session's directory (root may).
		if dir = filepath.Clean(dir); filepath.Dir(dir) == filepath.Clean(s.sessionWS) {
			return filepath.Base(dir)
		}
	}
	return ""
}

// errNoSessionWorkspace answers a read of a session workspace that holds
// nothing yet.
func errNoSessionWorkspace(rel string) error {
	return errkind.Errorf(errkind.NotFound, "%q: this session's workspace holds nothing yet; write files with workspace.write (or run a script with workspace %q) first", rel, SessionWorkspaceName)
}

// fileOp runs one files API call on the caller's session's workspace and
// audits it (a refusal too, marked so the front end does not repeat it).
// The workspace is made for a write (create); op gets nil for one that
// does not exist yet.
func (s *Service) fileOp(ctx context.Context, caller api.Peer, method, event, sessionID string, create bool, info *audit.WorkspaceOpInfo, op func(*workspace.Workspace) error) error {
	ws, release, err := s.openSessionWorkspace(caller, sessionID, create)
	if err == nil {
		err = op(ws)
		release()
		if ws != nil && unavailable(err) {
			// Removed or closed under the call: opened anew next time.
			s.wsOpen.drop(sessionID)
		}
	}
	rec := base(ctx, caller, method, event, sessionID)
	rec.WorkspaceOp, rec.Outcome = info, audit.OutcomeOK
	if err != nil {
		rec.Outcome, rec.Error = audit.OutcomeRefused, err.Error()
	}
	if aerr := s.record(ctx, rec); aerr != nil {
		return aerr
	}
	return api.MarkAudited(err)
}

// ListWorkspace implements api.Service (workspace.list).
func (s *Service) ListWorkspace(ctx context.Context, caller api.Peer, p api.WorkspaceListParams) (*api.WorkspaceListResult, error) {
	res := &api.WorkspaceListResult{Entries: []api.WorkspaceEntry{}, Quota: s.wsQuota}
	info := &audit.WorkspaceOpInfo{Path: p.Path, Recursive: p.Recursive}
	err := s.fileOp(ctx, caller, api.MethodWorkspaceList, audit.EventWorkspaceList, p.SessionID, false, info, func(ws *workspace.Workspace) error {
		if ws == nil {
			return nil
		}
		ents, truncated, err := ws.List(p.Path, p.Recursive, p.Limit)
		if err != nil {
			return err
		}
		used, _, err := ws.Usage()
		if err != nil {
			return err
		}
		res.Entries, res.Truncated, res.Bytes = append(res.Entries, ents...), truncated, used
		info.Entries = len(ents)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// StatWorkspace implements api.Service (workspace.stat).
func (s *Service) StatWorkspace(ctx context.Context, caller api.Peer, p api.WorkspacePathParams) (*api.WorkspaceEntry, error) {
	var out api.WorkspaceEntry
	err := s.fileOp(ctx, caller, api.MethodWorkspaceStat, audit.EventWorkspaceStat, p.SessionID, false, &audit.WorkspaceOpInfo{Path: p.Path}, func(ws *workspace.Workspace) error {
		if ws == nil {
			return errNoSessionWorkspace(p.Path)
		}
		var err error
		out, err = ws.Stat(p.Path)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ReadWorkspace implements api.Service (workspace.read).
func (s *Service) ReadWorkspace(ctx context.Context, caller api.Peer, p api.WorkspaceReadParams) (*api.WorkspaceReadResult, error) {
	if p.Offset < 0 || p.Length < 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "offset and length must not be negative")
	}
	res := &api.WorkspaceReadResult{Offset: p.Offset, Data: []byte{}}
	info := &audit.WorkspaceOpInfo{Path: p.Path, Offset: p.Offset}
	err := s.fileOp(ctx, caller, api.MethodWorkspaceRead, audit.EventWorkspaceRead, p.SessionID, false, info, func(ws *workspace.Workspace) error {
		if ws == nil {
			return errNoSessionWorkspace(p.Path)
		}
		n := p.Length
		if n == 0 || n > api.MaxWorkspaceChunk {
			n = api.MaxWorkspaceChunk
		}
		data, size, eof, err := ws.ReadAt(p.Path, p.Offset, n)
		if err != nil {
			return err
		}
		res.Data, res.Size, res.EOF = data, size, eof
		info.Length, info.Size = int64(len(data)), size
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// WriteWorkspace implements api.Service (workspace.write).
func (s *Service) WriteWorkspace(ctx context.Context, caller api.Peer, p api.WorkspaceWriteParams) (*api.WorkspaceWriteResult, error) {
	if len(p.Data) > api.MaxWorkspaceChunk {
		return nil, errkind.Errorf(errkind.LimitExceeded, "data is %d bytes, over the %d-byte chunk: write the file in pieces, each at the offset where the last ended", len(p.Data), api.MaxWorkspaceChunk)
	}
	if p.Offset < 0 || (p.Truncate && p.Offset != 0) {
		return nil, errkind.Errorf(errkind.InvalidParams, "offset must not be negative, and truncate starts a file over from offset 0")
	}
	res := &api.WorkspaceWriteResult{}
	info := &audit.WorkspaceOpInfo{Path: p.Path, Offset: p.Offset, Length: int64(len(p.Data)), SHA256: runner.SHA256Hex(p.Data), Truncate: p.Truncate}
	err := s.fileOp(ctx, caller, api.MethodWorkspaceWrite, audit.EventWorkspaceWrite, p.SessionID, true, info, func(ws *workspace.Workspace) error {
		acct, err := s.workspaceAccount(p.SessionID, caller.UID)
		if err != nil {
			return err
		}
		size, err := ws.WriteAt(p.Path, p.Offset, p.Data, p.Truncate, p.Mode, workspace.Options{Quota: s.wsQuota, Account: acct})
		res.Size, info.Size = size, size
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// DeleteWorkspace implements api.Service (workspace.delete).
func (s *Service) DeleteWorkspace(ctx context.Context, caller api.Peer, p api.WorkspaceDeleteParams) (*api.WorkspaceDeleteResult, error) {
	res := &api.WorkspaceDeleteResult{}
	info := &audit.WorkspaceOpInfo{Path: p.Path, Recursive: p.Recursive}
	err := s.fileOp(ctx, caller, api.MethodWorkspaceDelete, audit.EventWorkspaceDelete, p.SessionID, false, info, func(ws *workspace.Workspace) error {
		if ws == nil {
			return errNoSessionWorkspace(p.Path)
		}
		acct, err := s.workspaceAccount(p.SessionID, caller.UID)
		if err != nil {
			return err
		}
		n, err := ws.DeleteAccounted(p.Path, p.Recursive, acct)
		res.Removed, info.Removed = n, n
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
