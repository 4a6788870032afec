package mcp

import (
	"context"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
)

// PromptArgument is the one argument of a skill prompt: what the user typed
// after the skill's name, filling $ARGUMENTS, $0, $1…
const PromptArgument = "arguments"

// syncPrompts registers one prompt per skill a person may invoke (a
// prompt is a user invocation: skills with disable-model-invocation are
// prompts, skills with user-invocable: false are not) and removes the
// prompts of skills that are gone; the SDK notifies clients. Called with
// c.mu held.
func (c *Conn) syncPrompts(list []api.SkillInfo) {
	var names []string
	for _, s := range list {
		if !s.UserInvocable {
			continue
		}
		names = append(names, s.Name)
		c.mcp.AddPrompt(&sdk.Prompt{
			Name:        s.Name,
			Description: s.Description,
			Arguments: []*sdk.PromptArgument{{
				Name:        PromptArgument,
				Description: "what to do with the skill; fills $ARGUMENTS (and $0, $1… split like shell words)",
			}},
		}, c.getPrompt)
	}
	if gone := missingFrom(names, c.prompts); len(gone) > 0 {
		c.mcp.RemovePrompts(gone...)
	}
	c.prompts = names
}

// missingFrom returns the entries of old that are not in now.
func missingFrom(now, old []string) []string {
	var gone []string
	for _, o := range old {
		if !slices.Contains(now, o) {
			gone = append(gone, o)
		}
	}
	return gone
}

// getPrompt activates a skill for one invocation through the service's
// skills.activate (a user invocation): the skill is loaded into the
// connection's session if needed (policy, lock and audit apply as for
// skills_load) and its body rendered with the arguments, its !`command`s
// run in the sandbox when policy allows them.
func (c *Conn) getPrompt(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
	res, err := c.s.svc.ActivateSkill(ctx, c.caller, api.ActivateParams{
		SessionID: c.session, Name: req.Params.Name, Arguments: req.Params.Arguments[PromptArgument], Invocation: api.InvocationUser,
	})
	if err != nil {
		return nil, toolError(err)
	}
	return &sdk.GetPromptResult{
		Description: res.Description,
		Messages:    []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: res.Body}}},
	}, nil
}
