package mcp

import (
	"context"
	"fmt"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/skills"
)

// PromptArgument is the one argument of a skill prompt: what the user typed
// after the skill's name, filling $ARGUMENTS, $0, $1…
const PromptArgument = "arguments"

// syncPrompts registers one prompt per model-invocable skill and removes
// the prompts of skills that are gone; the SDK notifies clients. Called
// with c.mu held.
func (c *Conn) syncPrompts(list []api.SkillInfo) {
	var names []string
	for _, s := range list {
		if !s.ModelInvocable {
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

// getPrompt activates a skill for one invocation: it loads the skill into
// the connection's session (policy and audit apply as for skills_load),
// reads its SKILL.md through the service and renders the body with the
// arguments.
func (c *Conn) getPrompt(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
	name := req.Params.Name
	receipt, err := c.s.svc.LoadSkills(ctx, c.caller, api.LoadParams{SessionID: c.session, Names: []string{name}, Mode: api.LoadAdd})
	if err != nil {
		return nil, toolError(err)
	}
	data, err := c.readWhole(ctx, c.session, name, "SKILL.md", skills.MaxFileSize)
	if err != nil {
		return nil, toolError(err)
	}
	doc, err := skills.Parse(data)
	if err != nil {
		return nil, toolError(fmt.Errorf("%s/SKILL.md: %w", name, err))
	}
	desc := ""
	for _, a := range receipt.ActiveSkills {
		if a.Name == name {
			if d, ok := a.Properties["description"].(string); ok {
				desc = d
			}
		}
	}
	text := skills.RenderArguments(doc.Body, req.Params.Arguments[PromptArgument])
	return &sdk.GetPromptResult{
		Description: desc,
		Messages:    []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: text}}},
	}, nil
}
