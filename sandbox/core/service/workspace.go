package service

import (
	"os"
	"syscall"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
)

// HostWorkspacePolicy says which host directories a call may name as its
// run's workspace.
type HostWorkspacePolicy int

const (
	// HostWorkspacesNone refuses every host workspace.
	HostWorkspacesNone HostWorkspacePolicy = iota
	// HostWorkspacesOwn: the caller is the user this process runs for
	// (skillbox mcp, skillbox run), who may name any directory; policy
	// still decides the mode (read by default).
	HostWorkspacesOwn
	// HostWorkspacesGranted: the daemon's callers may name a directory
	// they own, where a policy rule sets the workspace mode for it (the
	// default mode does not count as a grant).
	HostWorkspacesGranted
)

// hostWorkspace turns a call's workspace params into the run's workspace
// request, refusing what the service's HostWorkspacePolicy does not let
// this caller name. What the write-back creates belongs to the caller when
// skillbox runs as root for somebody else.
func (s *Service) hostWorkspace(caller api.Peer, p api.WorkspaceParams) (*runner.WorkspaceRequest, error) {
	if p.Workspace == "" {
		if len(p.Inputs) > 0 {
			return nil, errkind.Errorf(errkind.InvalidParams, "inputs name paths of a workspace: give the directory in workspace")
		}
		return nil, nil
	}
	req := &runner.WorkspaceRequest{Dir: p.Workspace, Kind: api.WorkspaceHost, Inputs: p.Inputs}
	switch s.hostWS {
	case HostWorkspacesOwn:
		req.Owner = WorkspaceOwner(p.Workspace)
		return req, nil
	case HostWorkspacesGranted:
		ws, err := workspace.Open(p.Workspace)
		if err != nil {
			return nil, err
		}
		owner, err := ws.Owner()
		dir := ws.Dir()
		ws.Close()
		if err != nil {
			return nil, err
		}
		if owner.UID != int(caller.UID) {
			return nil, errkind.Errorf(errkind.Denied, "the workspace %s belongs to uid %d, not to you (uid %d): name a directory of your own", dir, owner.UID, caller.UID)
		}
		req.Dir, req.Owner, req.RequireGrant = dir, owner, true
		return req, nil
	}
	return nil, errkind.Errorf(errkind.Denied, "this skillbox takes no host workspace from its callers")
}

// WorkspaceOwner is who owns what the write-back creates in dir when root
// runs skillbox in somebody's directory (sudo): the directory's owner, so
// the person's project does not fill with root's files; nil otherwise.
func WorkspaceOwner(dir string) *workspace.Owner {
	if os.Geteuid() != 0 {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil
	}
	return &workspace.Owner{UID: int(st.Uid), GID: int(st.Gid)}
}
