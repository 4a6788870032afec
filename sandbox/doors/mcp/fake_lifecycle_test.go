package mcp_test

import (
	"context"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/skills"
)

// ActivateSkill loads the skill and renders its body with the one
// renderer, honouring disable-model-invocation for model invocations.
func (f *fakeService) ActivateSkill(ctx context.Context, caller api.Peer, p api.ActivateParams) (*api.ActivateResult, error) {
	f.record("activate:" + p.Name + ":" + p.Invocation)
	s, err := f.reg.Get(p.Name)
	if err != nil {
		return nil, errkind.Wrap(api.ErrNotFound, err)
	}
	if p.Invocation != api.InvocationUser && s.DisableModelInvocation {
		return nil, errkind.Errorf(api.ErrDenied, "skill %q disables model invocation", p.Name)
	}
	if _, err := f.LoadSkills(ctx, caller, api.LoadParams{SessionID: p.SessionID, Names: []string{p.Name}, Mode: api.LoadAdd}); err != nil {
		return nil, err
	}
	body := skills.Render(s.Body, skills.Invocation{Arguments: p.Arguments, SkillDir: "."})
	return &api.ActivateResult{Name: s.Name, Description: s.Description, Digest: s.Digest, SkillDir: ".", Body: body, Tokens: skills.EstimateTokens(body)}, nil
}

func (f *fakeService) ReportTool(context.Context, api.Peer, api.ReportToolParams) (*api.ReportToolResult, error) {
	return &api.ReportToolResult{Hooks: []api.HookRun{}}, nil
}

func (f *fakeService) ProposeChange(context.Context, api.Peer, api.ProposeParams) (*api.Proposal, error) {
	return nil, api.ErrUnavailable
}

func (f *fakeService) ListProposals(context.Context, api.Peer, api.ListProposalsParams) (*api.ListProposalsResult, error) {
	return &api.ListProposalsResult{Proposals: []*api.Proposal{}}, nil
}

func (f *fakeService) ShowProposal(context.Context, api.Peer, api.ProposalIDParams) (*api.Proposal, error) {
	return nil, api.ErrNotFound
}

func (f *fakeService) ApproveProposal(context.Context, api.Peer, api.ProposalIDParams) (*api.Proposal, error) {
	return nil, api.ErrNotFound
}

func (f *fakeService) RejectProposal(context.Context, api.Peer, api.ProposalIDParams) (*api.Proposal, error) {
	return nil, api.ErrNotFound
}

func (f *fakeService) LockSkills(context.Context, api.Peer, api.LockParams) (*api.LockResult, error) {
	return nil, api.ErrUnavailable
}

func (f *fakeService) ListWorkspace(context.Context, api.Peer, api.WorkspaceListParams) (*api.WorkspaceListResult, error) {
	return nil, api.ErrUnavailable
}

func (f *fakeService) StatWorkspace(context.Context, api.Peer, api.WorkspacePathParams) (*api.WorkspaceEntry, error) {
	return nil, api.ErrUnavailable
}

func (f *fakeService) ReadWorkspace(context.Context, api.Peer, api.WorkspaceReadParams) (*api.WorkspaceReadResult, error) {
	return nil, api.ErrUnavailable
}

func (f *fakeService) WriteWorkspace(context.Context, api.Peer, api.WorkspaceWriteParams) (*api.WorkspaceWriteResult, error) {
	return nil, api.ErrUnavailable
}

func (f *fakeService) DeleteWorkspace(context.Context, api.Peer, api.WorkspaceDeleteParams) (*api.WorkspaceDeleteResult, error) {
	return nil, api.ErrUnavailable
}
