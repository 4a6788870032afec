package client

import (
	"context"

	"github.com/skillbox/skillbox/sandbox/api"
)

// call is Call for a typed result.
func call[R any](ctx context.Context, c *Client, method string, params any) (*R, error) {
	var r R
	if err := c.Call(ctx, method, params, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// CreateSessionWith starts a session with bound skills (an agent's
// uses_skills and/or p.UsesSkills) loaded.
func (c *Client) CreateSessionWith(ctx context.Context, p api.CreateSessionParams) (*api.CreateSessionResult, error) {
	return call[api.CreateSessionResult](ctx, c, api.MethodSessionsCreate, p)
}

// Activate renders a skill's body for one invocation (skills.activate).
func (c *Client) Activate(ctx context.Context, p api.ActivateParams) (*api.ActivateResult, error) {
	return call[api.ActivateResult](ctx, c, api.MethodSkillsActivate, p)
}

// ReportTool runs the active skills' PostToolUse hooks (tools.report).
func (c *Client) ReportTool(ctx context.Context, p api.ReportToolParams) (*api.ReportToolResult, error) {
	return call[api.ReportToolResult](ctx, c, api.MethodToolsReport, p)
}

// Propose stores a proposed change to a loaded skill (skills.propose).
func (c *Client) Propose(ctx context.Context, p api.ProposeParams) (*api.Proposal, error) {
	return call[api.Proposal](ctx, c, api.MethodSkillsPropose, p)
}

// ListProposals lists proposals (proposals.list).
func (c *Client) ListProposals(ctx context.Context, p api.ListProposalsParams) (*api.ListProposalsResult, error) {
	return call[api.ListProposalsResult](ctx, c, api.MethodProposalsList, p)
}

// ShowProposal returns one proposal with its diff (proposals.show).
func (c *Client) ShowProposal(ctx context.Context, p api.ProposalIDParams) (*api.Proposal, error) {
	return call[api.Proposal](ctx, c, api.MethodProposalsShow, p)
}

// ApproveProposal applies (or exports) a proposal (proposals.approve).
func (c *Client) ApproveProposal(ctx context.Context, p api.ProposalIDParams) (*api.Proposal, error) {
	return call[api.Proposal](ctx, c, api.MethodProposalsApprove, p)
}

// RejectProposal rejects a proposal (proposals.reject).
func (c *Client) RejectProposal(ctx context.Context, p api.ProposalIDParams) (*api.Proposal, error) {
	return call[api.Proposal](ctx, c, api.MethodProposalsReject, p)
}

// LockSkills pins skills' current versions in the lock file (skills.lock).
func (c *Client) LockSkills(ctx context.Context, p api.LockParams) (*api.LockResult, error) {
	return call[api.LockResult](ctx, c, api.MethodSkillsLock, p)
}
