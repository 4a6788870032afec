package api

import "context"

// Service is the tool-call surface every front end adapts: one method per
// call, the caller's identity as a value, params and results as the types
// of this package. The service (sandbox/core/service.Service) implements it;
// front ends decode a request, call the method and encode the answer, and
// pass a ctx that carries the request id (WithRequestID) and, for runs, an
// EventSink (WithEventSink). Errors are classified with KindOf.
type Service interface {
	CreateSession(ctx context.Context, caller Peer, p CreateSessionParams) (*CreateSessionResult, error)
	CloseSession(ctx context.Context, caller Peer, p SessionParams) (*CloseSessionResult, error)
	Instructions(ctx context.Context, caller Peer, p SessionParams) (*InstructionsResult, error)
	ListSkills(ctx context.Context, caller Peer, p ListSkillsParams) ([]SkillInfo, error)
	LoadSkills(ctx context.Context, caller Peer, p LoadParams) (*LoadResult, error)
	UnloadSkills(ctx context.Context, caller Peer, p UnloadParams) (*LoadResult, error)
	ReadSkillFile(ctx context.Context, caller Peer, p ReadParams) (*ReadResult, error)
	RunScript(ctx context.Context, caller Peer, p RunScriptParams) (*RunScriptResult, error)
	RunCode(ctx context.Context, caller Peer, p RunCodeParams) (*RunScriptResult, error)
	CheckTool(ctx context.Context, caller Peer, p CheckToolParams) (*CheckToolResult, error)
	CheckSkill(ctx context.Context, caller Peer, p CheckSkillParams) (*CheckSkillResult, error)
	ListConfirmations(ctx context.Context, caller Peer, p ListConfirmationsParams) (*ListConfirmationsResult, error)
	ApproveConfirmation(ctx context.Context, caller Peer, p ConfirmationIDParams) (*Confirmation, error)
	DenyConfirmation(ctx context.Context, caller Peer, p ConfirmationIDParams) (*Confirmation, error)
	CancelRun(ctx context.Context, caller Peer, p CancelRunParams) (*CancelRunResult, error)
	ListRuns(ctx context.Context, caller Peer, p RunsListParams) (*RunsListResult, error)
	RunLogs(ctx context.Context, caller Peer, p RunLogsParams) (*RunLogsResult, error)
	WaitRun(ctx context.Context, caller Peer, p RunWaitParams) (*BackgroundRun, error)
	SignalRun(ctx context.Context, caller Peer, p RunSignalParams) (*BackgroundRun, error)
	PauseSession(ctx context.Context, caller Peer, p SessionParams) (*PauseSessionResult, error)
	ResumeSession(ctx context.Context, caller Peer, p ResumeSessionParams) (*ResumeSessionResult, error)
	ForkSession(ctx context.Context, caller Peer, p SessionParams) (*ForkSessionResult, error)

	ActivateSkill(ctx context.Context, caller Peer, p ActivateParams) (*ActivateResult, error)
	ReportTool(ctx context.Context, caller Peer, p ReportToolParams) (*ReportToolResult, error)
	ProposeChange(ctx context.Context, caller Peer, p ProposeParams) (*Proposal, error)
	ListProposals(ctx context.Context, caller Peer, p ListProposalsParams) (*ListProposalsResult, error)
	ShowProposal(ctx context.Context, caller Peer, p ProposalIDParams) (*Proposal, error)
	ApproveProposal(ctx context.Context, caller Peer, p ProposalIDParams) (*Proposal, error)
	RejectProposal(ctx context.Context, caller Peer, p ProposalIDParams) (*Proposal, error)
	LockSkills(ctx context.Context, caller Peer, p LockParams) (*LockResult, error)

	ListWorkspace(ctx context.Context, caller Peer, p WorkspaceListParams) (*WorkspaceListResult, error)
	StatWorkspace(ctx context.Context, caller Peer, p WorkspacePathParams) (*WorkspaceEntry, error)
	ReadWorkspace(ctx context.Context, caller Peer, p WorkspaceReadParams) (*WorkspaceReadResult, error)
	WriteWorkspace(ctx context.Context, caller Peer, p WorkspaceWriteParams) (*WorkspaceWriteResult, error)
	DeleteWorkspace(ctx context.Context, caller Peer, p WorkspaceDeleteParams) (*WorkspaceDeleteResult, error)
}
