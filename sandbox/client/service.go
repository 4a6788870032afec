package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/skillbox/skillbox/sandbox/api"
)

// Client is an api.Service: the same surface the daemon's service offers in
// process, so a front end (the MCP server of `skillbox mcp --socket`) serves
// a daemon exactly as it serves a service of its own.
//
// The caller argument of every method is ignored: over the socket the
// daemon identifies the caller by the connection's peer credentials
// (SO_PEERCRED), i.e. this process, and nothing the client sends can change
// that. Pass api.Peer{}.
//
// Errors look like the service's own: a daemon error is an *Error (it
// matches its kind's sentinel and carries its data); a run or hook held for
// approval also reads as *api.ConfirmationRequiredError, pending when it
// names a confirmation the call passed; a lost connection is unavailable.
var _ api.Service = (*Client)(nil)

// call makes a call with a typed result; passed are the confirmation ids
// the call passed (see heldError).
func call[R any](ctx context.Context, c *Client, method string, params any, passed ...string) (*R, error) {
	var r R
	if err := c.Call(ctx, method, params, &r); err != nil {
		return nil, serviceError(err, passed...)
	}
	return &r, nil
}

// heldError is a daemon's confirmation_required answer: the wire error as
// it came (its text, errors.As to *Error) that also reads as the service's
// *api.ConfirmationRequiredError, with the confirmation_ids of held hooks
// kept in its data.
type heldError struct {
	wire *Error
	held error
}

func (e *heldError) Error() string   { return e.wire.Error() }
func (e *heldError) Unwrap() []error { return []error{e.held, e.wire} }

// serviceError makes a daemon's confirmation request a heldError, pending
// when it names a confirmation the call passed. Other errors stay as they
// are.
func serviceError(err error, passed ...string) error {
	var we *Error
	if !errors.As(err, &we) {
		return err
	}
	d, ok := we.ConfirmationRequired()
	if !ok {
		return err
	}
	var held error = &api.ConfirmationRequiredError{
		ID: d.ConfirmationID, Reason: d.Reason, Rule: d.Rule, Digest: d.Digest,
		Pending: slices.Contains(passed, d.ConfirmationID),
	}
	if ids, ok := we.Data["confirmation_ids"]; ok {
		held = api.WithData(held, map[string]any{"confirmation_ids": ids})
	}
	return &heldError{wire: we, held: held}
}

// CreateSession starts a session, with bound skills (an agent's
// uses_skills and/or p.UsesSkills) loaded.
func (c *Client) CreateSession(ctx context.Context, _ api.Peer, p api.CreateSessionParams) (*api.CreateSessionResult, error) {
	return call[api.CreateSessionResult](ctx, c, api.MethodSessionsCreate, p)
}

// NewSession starts a session and returns its id.
func (c *Client) NewSession(ctx context.Context) (string, error) {
	r, err := c.CreateSession(ctx, api.Peer{}, api.CreateSessionParams{})
	if err != nil {
		return "", err
	}
	return r.SessionID, nil
}

// CloseSession ends a session.
func (c *Client) CloseSession(ctx context.Context, _ api.Peer, p api.SessionParams) (*api.CloseSessionResult, error) {
	return call[api.CloseSessionResult](ctx, c, api.MethodSessionsClose, p)
}

// Instructions returns the instructions for the host's next LLM call.
func (c *Client) Instructions(ctx context.Context, _ api.Peer, p api.SessionParams) (*api.InstructionsResult, error) {
	return call[api.InstructionsResult](ctx, c, api.MethodSessionsInstructions, p)
}

// ListSkills lists the indexed skills matching p. skills.list answers with
// a bare array, [{name, description, location, digest, tags,
// model_invocable}]; skills disabled for model invocation are in it, marked
// ModelInvocable false. (The {"skills": [...]} object of earlier daemons is
// still read.)
func (c *Client) ListSkills(ctx context.Context, _ api.Peer, p api.ListSkillsParams) ([]api.SkillInfo, error) {
	var raw json.RawMessage
	if err := c.Call(ctx, api.MethodSkillsList, p, &raw); err != nil {
		return nil, serviceError(err)
	}
	out := []api.SkillInfo{}
	if err := decodeList(raw, "skills", &out); err != nil {
		return nil, fmt.Errorf("skillbox: decoding the skills.list result: %w", err)
	}
	return out, nil
}

// LoadSkills activates skills in a session and returns the receipt.
func (c *Client) LoadSkills(ctx context.Context, _ api.Peer, p api.LoadParams) (*api.LoadResult, error) {
	return call[api.LoadResult](ctx, c, api.MethodSkillsLoad, p)
}

// UnloadSkills deactivates skills and returns the updated receipt.
func (c *Client) UnloadSkills(ctx context.Context, _ api.Peer, p api.UnloadParams) (*api.LoadResult, error) {
	return call[api.LoadResult](ctx, c, api.MethodSkillsUnload, p)
}

// ReadSkillFile reads a file of a loaded skill.
func (c *Client) ReadSkillFile(ctx context.Context, _ api.Peer, p api.ReadParams) (*api.ReadResult, error) {
	return call[api.ReadResult](ctx, c, api.MethodSkillsRead, p)
}

// RunScript runs a script of a loaded skill in a sandbox. When policy holds
// the run for approval the error is an *Error of KindConfirmationRequired
// (see (*Error).ConfirmationRequired) and an *api.ConfirmationRequiredError.
// With p.Stream set, the run's events go to the EventSink of ctx
// (api.WithEventSink) if it has one, else to OnNotification's function.
func (c *Client) RunScript(ctx context.Context, _ api.Peer, p api.RunScriptParams) (*api.RunScriptResult, error) {
	return run(ctx, c, api.MethodSkillsRunScript, p.Stream, &p, p.ConfirmationID)
}

// RunCode runs code the caller wrote in a sandbox with every loaded skill
// mounted (skills.run_code); errors and events as RunScript's.
func (c *Client) RunCode(ctx context.Context, _ api.Peer, p api.RunCodeParams) (*api.RunScriptResult, error) {
	return run(ctx, c, api.MethodSkillsRunCode, p.Stream, &p, p.ConfirmationID)
}

// run makes a run call. When its events are wanted by ctx's EventSink it
// goes on a connection of its own, since the daemon sends a run's events on
// the connection of its call: they then reach that call's sink alone.
func run(ctx context.Context, c *Client, method string, stream bool, params any, confirmationID string) (*api.RunScriptResult, error) {
	sink := api.EventSinkFrom(ctx)
	if !stream || sink == nil {
		return call[api.RunScriptResult](ctx, c, method, params, confirmationID)
	}
	own, err := Dial(ctx, c.path)
	if err != nil {
		return nil, err
	}
	defer own.Close()
	own.OnNotification(func(n Notification) {
		if ev, err := n.Event(); err == nil {
			sink(derefEvent(ev))
		}
	})
	return call[api.RunScriptResult](ctx, own, method, params, confirmationID)
}

// derefEvent gives events the value types the service emits in process.
func derefEvent(ev api.Event) api.Event {
	switch e := ev.(type) {
	case *api.RunStartedEvent:
		return *e
	case *api.RunOutputEvent:
		return *e
	case *api.RunOutputDroppedEvent:
		return *e
	case *api.RunExitedEvent:
		return *e
	}
	return ev
}

// CancelRun stops a run of the caller's (its id is in run.started and in
// the result); the run's call then returns with reason "cancelled".
func (c *Client) CancelRun(ctx context.Context, _ api.Peer, p api.CancelRunParams) (*api.CancelRunResult, error) {
	return call[api.CancelRunResult](ctx, c, api.MethodRunsCancel, p)
}

// ListRuns lists the session's background runs.
func (c *Client) ListRuns(ctx context.Context, _ api.Peer, p api.RunsListParams) (*api.RunsListResult, error) {
	return call[api.RunsListResult](ctx, c, api.MethodRunsList, p)
}

// RunLogs reads a background run's log by offset.
func (c *Client) RunLogs(ctx context.Context, _ api.Peer, p api.RunLogsParams) (*api.RunLogsResult, error) {
	return call[api.RunLogsResult](ctx, c, api.MethodRunsLogs, p)
}

// WaitRun waits (boundedly) for a background run to end.
func (c *Client) WaitRun(ctx context.Context, _ api.Peer, p api.RunWaitParams) (*api.BackgroundRun, error) {
	return call[api.BackgroundRun](ctx, c, api.MethodRunsWait, p)
}

// SignalRun sends a signal to a background run.
func (c *Client) SignalRun(ctx context.Context, _ api.Peer, p api.RunSignalParams) (*api.BackgroundRun, error) {
	return call[api.BackgroundRun](ctx, c, api.MethodRunsSignal, p)
}

// PauseSession checkpoints the session's sandboxes to disk.
func (c *Client) PauseSession(ctx context.Context, _ api.Peer, p api.SessionParams) (*api.PauseSessionResult, error) {
	return call[api.PauseSessionResult](ctx, c, api.MethodSessionsPause, p)
}

// ResumeSession restores (or, fresh, discards) the session's paused sandboxes.
func (c *Client) ResumeSession(ctx context.Context, _ api.Peer, p api.ResumeSessionParams) (*api.ResumeSessionResult, error) {
	return call[api.ResumeSessionResult](ctx, c, api.MethodSessionsResume, p)
}

// ForkSession makes a new session from a checkpoint of this one.
func (c *Client) ForkSession(ctx context.Context, _ api.Peer, p api.SessionParams) (*api.ForkSessionResult, error) {
	return call[api.ForkSessionResult](ctx, c, api.MethodSessionsFork, p)
}

// CheckTool asks whether the host may call one of its own tools now.
func (c *Client) CheckTool(ctx context.Context, _ api.Peer, p api.CheckToolParams) (*api.CheckToolResult, error) {
	return call[api.CheckToolResult](ctx, c, api.MethodToolsCheck, p, append([]string{p.ConfirmationID}, p.ConfirmationIDs...)...)
}

// CheckSkill is skills.check: the imports and programs a skill's scripts
// need, resolved against its image and dependency layer.
func (c *Client) CheckSkill(ctx context.Context, _ api.Peer, p api.CheckSkillParams) (*api.CheckSkillResult, error) {
	return call[api.CheckSkillResult](ctx, c, api.MethodSkillsCheck, p)
}

// ListConfirmations lists confirmation requests the caller may see.
func (c *Client) ListConfirmations(ctx context.Context, _ api.Peer, p api.ListConfirmationsParams) (*api.ListConfirmationsResult, error) {
	var raw json.RawMessage
	if err := c.Call(ctx, api.MethodConfirmationsList, p, &raw); err != nil {
		return nil, serviceError(err)
	}
	var list []*api.Confirmation
	if err := decodeList(raw, "confirmations", &list); err != nil {
		return nil, fmt.Errorf("skillbox: decoding the confirmations.list result: %w", err)
	}
	return &api.ListConfirmationsResult{Confirmations: list}, nil
}

// ApproveConfirmation approves a pending confirmation (the caller must be
// an approver).
func (c *Client) ApproveConfirmation(ctx context.Context, _ api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	return call[api.Confirmation](ctx, c, api.MethodConfirmationsApprove, p)
}

// DenyConfirmation denies a confirmation; denials are final.
func (c *Client) DenyConfirmation(ctx context.Context, _ api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	return call[api.Confirmation](ctx, c, api.MethodConfirmationsDeny, p)
}

// ActivateSkill renders a skill's body for one invocation (skills.activate).
func (c *Client) ActivateSkill(ctx context.Context, _ api.Peer, p api.ActivateParams) (*api.ActivateResult, error) {
	return call[api.ActivateResult](ctx, c, api.MethodSkillsActivate, p, p.ConfirmationID)
}

// ReportTool runs the active skills' PostToolUse hooks (tools.report).
func (c *Client) ReportTool(ctx context.Context, _ api.Peer, p api.ReportToolParams) (*api.ReportToolResult, error) {
	return call[api.ReportToolResult](ctx, c, api.MethodToolsReport, p, append([]string{p.ConfirmationID}, p.ConfirmationIDs...)...)
}

// ProposeChange stores a proposed change to a loaded skill (skills.propose).
func (c *Client) ProposeChange(ctx context.Context, _ api.Peer, p api.ProposeParams) (*api.Proposal, error) {
	return call[api.Proposal](ctx, c, api.MethodSkillsPropose, p)
}

// ListProposals lists proposals (proposals.list).
func (c *Client) ListProposals(ctx context.Context, _ api.Peer, p api.ListProposalsParams) (*api.ListProposalsResult, error) {
	return call[api.ListProposalsResult](ctx, c, api.MethodProposalsList, p)
}

// ShowProposal returns one proposal with its diff (proposals.show).
func (c *Client) ShowProposal(ctx context.Context, _ api.Peer, p api.ProposalIDParams) (*api.Proposal, error) {
	return call[api.Proposal](ctx, c, api.MethodProposalsShow, p)
}

// ApproveProposal applies (or exports) a proposal (proposals.approve).
func (c *Client) ApproveProposal(ctx context.Context, _ api.Peer, p api.ProposalIDParams) (*api.Proposal, error) {
	return call[api.Proposal](ctx, c, api.MethodProposalsApprove, p)
}

// RejectProposal rejects a proposal (proposals.reject).
func (c *Client) RejectProposal(ctx context.Context, _ api.Peer, p api.ProposalIDParams) (*api.Proposal, error) {
	return call[api.Proposal](ctx, c, api.MethodProposalsReject, p)
}

// LockSkills pins skills' current versions in the lock file (skills.lock).
func (c *Client) LockSkills(ctx context.Context, _ api.Peer, p api.LockParams) (*api.LockResult, error) {
	return call[api.LockResult](ctx, c, api.MethodSkillsLock, p)
}

// ListWorkspace lists the session's workspace (workspace.list).
func (c *Client) ListWorkspace(ctx context.Context, _ api.Peer, p api.WorkspaceListParams) (*api.WorkspaceListResult, error) {
	return call[api.WorkspaceListResult](ctx, c, api.MethodWorkspaceList, p)
}

// StatWorkspace describes one path of the session's workspace
// (workspace.stat).
func (c *Client) StatWorkspace(ctx context.Context, _ api.Peer, p api.WorkspacePathParams) (*api.WorkspaceEntry, error) {
	return call[api.WorkspaceEntry](ctx, c, api.MethodWorkspaceStat, p)
}

// ReadWorkspace reads a piece of a file of the session's workspace
// (workspace.read).
func (c *Client) ReadWorkspace(ctx context.Context, _ api.Peer, p api.WorkspaceReadParams) (*api.WorkspaceReadResult, error) {
	return call[api.WorkspaceReadResult](ctx, c, api.MethodWorkspaceRead, p)
}

// WriteWorkspace writes a piece of a file of the session's workspace
// (workspace.write).
func (c *Client) WriteWorkspace(ctx context.Context, _ api.Peer, p api.WorkspaceWriteParams) (*api.WorkspaceWriteResult, error) {
	return call[api.WorkspaceWriteResult](ctx, c, api.MethodWorkspaceWrite, p)
}

// DeleteWorkspace removes a path of the session's workspace
// (workspace.delete).
func (c *Client) DeleteWorkspace(ctx context.Context, _ api.Peer, p api.WorkspaceDeleteParams) (*api.WorkspaceDeleteResult, error) {
	return call[api.WorkspaceDeleteResult](ctx, c, api.MethodWorkspaceDelete, p)
}
