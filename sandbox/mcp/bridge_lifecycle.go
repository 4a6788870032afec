package mcp

import (
	"context"

	"github.com/skillbox/skillbox/sandbox/api"
)

func (b *Bridge) ActivateSkill(ctx context.Context, _ api.Peer, p api.ActivateParams) (*api.ActivateResult, error) {
	r, err := b.Client.Activate(ctx, p)
	return r, fromClient(err, p.ConfirmationID)
}

func (b *Bridge) ReportTool(ctx context.Context, _ api.Peer, p api.ReportToolParams) (*api.ReportToolResult, error) {
	r, err := b.Client.ReportTool(ctx, p)
	return r, fromClient(err, append([]string{p.ConfirmationID}, p.ConfirmationIDs...)...)
}

func (b *Bridge) ProposeChange(ctx context.Context, _ api.Peer, p api.ProposeParams) (*api.Proposal, error) {
	r, err := b.Client.Propose(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) ListProposals(ctx context.Context, _ api.Peer, p api.ListProposalsParams) (*api.ListProposalsResult, error) {
	r, err := b.Client.ListProposals(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) ShowProposal(ctx context.Context, _ api.Peer, p api.ProposalIDParams) (*api.Proposal, error) {
	r, err := b.Client.ShowProposal(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) ApproveProposal(ctx context.Context, _ api.Peer, p api.ProposalIDParams) (*api.Proposal, error) {
	r, err := b.Client.ApproveProposal(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) RejectProposal(ctx context.Context, _ api.Peer, p api.ProposalIDParams) (*api.Proposal, error) {
	r, err := b.Client.RejectProposal(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) LockSkills(ctx context.Context, _ api.Peer, p api.LockParams) (*api.LockResult, error) {
	r, err := b.Client.LockSkills(ctx, p)
	return r, fromClient(err, "")
}
