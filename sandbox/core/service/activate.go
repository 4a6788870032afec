package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/skills"
)

// Activation renders a skill's body for one invocation, the way hosts do
// for a slash command or a model's choice, but with every !`command` run in
// a sandbox (policy tool skills.render_command) instead of on the host.

// Limits of one !`command` of a skill body: it is meant to fetch a little
// context (a date, a listing), not to do work.
const (
	RenderCommandTimeout = 10 * time.Second
	RenderCommandOutput  = 16 << 10
)

// ActivateSkillDir is what ${SKILL_DIR} / ${CLAUDE_SKILL_DIR} become in a
// body given to the model: skills.read and skills.run_script take paths
// relative to the skill, so "./scripts/x.py" is the path to use. Inside a
// !`command` they are the sandbox's skill mount.
const ActivateSkillDir = "."

// EventSkillActivate is the audit event of skills.activate.
const EventSkillActivate = "skills.activate"

// ActivateSkill implements api.Service.
func (s *Service) ActivateSkill(ctx context.Context, caller api.Peer, p api.ActivateParams) (*api.ActivateResult, error) {
	const method = api.MethodSkillsActivate
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	if err := skills.ValidName(p.Name); err != nil {
		return nil, errkind.Wrap(errkind.InvalidParams, err)
	}
	inv := p.Invocation
	if inv == "" {
		inv = api.InvocationModel
	}
	if inv != api.InvocationModel && inv != api.InvocationUser {
		return nil, errkind.Errorf(errkind.InvalidParams, "invocation %q: use %q (the model chose the skill) or %q (a person invoked it)", inv, api.InvocationModel, api.InvocationUser)
	}
	sk, err := s.skills.Get(p.Name)
	if err != nil {
		return nil, err
	}
	rec := base(ctx, caller, method, EventSkillActivate, p.SessionID)
	rec.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
	rec.Detail = map[string]string{"invocation": inv}
	if why := invocationRefusal(sk, inv); why != "" {
		rec.Outcome, rec.Error = audit.OutcomeRefused, why
		err := errkind.Errorf(errkind.Denied, "%s", why)
		if s.record(ctx, rec) == nil {
			err = api.MarkAudited(err)
		}
		return nil, err
	}
	loaded := false
	for _, a := range ses.Active {
		loaded = loaded || (a.Name == sk.Name && a.Digest == sk.Digest)
	}
	if !loaded {
		if _, err := s.LoadSkills(ctx, caller, api.LoadParams{SessionID: p.SessionID, Names: []string{sk.Name}, Mode: api.LoadAdd}); err != nil {
			return nil, err
		}
		if ses, err = s.session(caller, p.SessionID); err != nil {
			return nil, err
		}
	}
	if sk, err = s.activeSkill(ses, sk.Name); err != nil {
		return nil, err
	}

	res := &api.ActivateResult{Name: sk.Name, Description: sk.Description, Digest: sk.Digest, SkillDir: ActivateSkillDir}
	confirmation := p.ConfirmationID
	body := skills.Render(sk.Body, skills.Invocation{
		Arguments: p.Arguments, SkillDir: ActivateSkillDir, CommandSkillDir: runtime.SkillMount,
		Run: func(command string) string {
			rc, text := s.renderCommand(ctx, caller, p.SessionID, sk, command, &confirmation)
			res.Commands = append(res.Commands, rc)
			return text
		},
	})
	res.Body, res.Tokens = body, skills.EstimateTokens(body)
	rec.Outcome = audit.OutcomeOK
	rec.Detail["body_sha256"] = runner.SHA256Hex([]byte(body))
	rec.Detail["commands"] = strconv.Itoa(len(res.Commands))
	if p.Arguments != "" {
		rec.Detail["arguments_sha256"] = runner.SHA256Hex([]byte(p.Arguments))
	}
	if err := s.record(ctx, rec); err != nil {
		return nil, err
	}
	return res, nil
}

// invocationRefusal says why sk may not be invoked this way ("" if it may).
func invocationRefusal(sk *skills.Skill, inv string) string {
	switch {
	case inv == api.InvocationModel && sk.DisableModelInvocation:
		return fmt.Sprintf("skill %q sets disable-model-invocation: only a person can invoke it (a user invocation, e.g. its prompt); do not activate it on your own", sk.Name)
	case inv == api.InvocationUser && !sk.UserInvocable():
		return fmt.Sprintf("skill %q sets user-invocable: false: it is background knowledge the model loads when relevant, not a command a person invokes", sk.Name)
	}
	return ""
}

// renderCommand runs one !`command` of sk's body through the one
// authorization path as tool skills.render_command and returns what
// replaces it in the body: its output, with a visible line when it failed
// or was not run. confirmation is an approval not used yet; the command
// policy holds for confirmation uses it (once).
func (s *Service) renderCommand(ctx context.Context, caller api.Peer, sessionID string, sk *skills.Skill, command string, confirmation *string) (api.RenderedCommand, string) {
	rc := api.RenderedCommand{Command: command, ExitCode: -1}
	input, _ := json.Marshal(map[string]string{"command": command})
	pol := s.cfg.For(sk.Name)
	o := RunOptions{Method: api.MethodSkillsActivate, SessionID: sessionID, Tool: api.ToolRenderCommand, ToolInput: input, Policy: pol}
	if *confirmation != "" {
		d := pol.Decide(policy.Request{Skill: sk.Name, AllowedTools: sk.AllowedTools, Tool: api.ToolRenderCommand, Input: input})
		if d.Effect == policy.EffectConfirm {
			o.ConfirmationID, *confirmation = *confirmation, ""
		}
	}
	req := RunRequest{
		Skill:   sk,
		Command: &CommandSpec{Command: command, Label: "SKILL.md !`" + audit.ClipText(command, 200) + "`"},
		Limits:  commandLimits(RenderCommandTimeout, RenderCommandOutput),
	}
	out, err := s.Run(ctx, caller, req, o)
	if err != nil {
		rc.Error = err.Error()
		var ce *api.ConfirmationRequiredError
		if errors.As(err, &ce) {
			rc.ConfirmationID = ce.ID
			return rc, fmt.Sprintf("[skillbox: command `%s` was not run: it needs an approver's confirmation (%s); once confirmation %s is approved, call skills.activate again with confirmation_id %q]",
				command, ce.Rule, ce.ID, ce.ID)
		}
		return rc, fmt.Sprintf("[skillbox: command `%s` was not run: %s]", command, oneLine(err.Error()))
	}
	r := out.Result
	rc.RunID, rc.ExitCode, rc.Reason, rc.Truncated = out.RunID, r.ExitCode, string(r.Reason), r.StdoutTruncated
	text := strings.TrimRight(string(r.Stdout), "\n")
	if r.StdoutTruncated {
		text += fmt.Sprintf("\n[skillbox: output of `%s` cut at %d bytes]", command, out.Plan.Limits().StdoutBytes)
	}
	if r.ExitCode != 0 || r.Reason != runtime.ReasonExit {
		why := fmt.Sprintf("exit status %d", r.ExitCode)
		if r.Reason != runtime.ReasonExit {
			why = string(r.Reason)
		}
		msg := fmt.Sprintf("[skillbox: command `%s` failed (%s, run %s)", command, why, out.RunID)
		if e := strings.TrimSpace(string(r.Stderr)); e != "" {
			msg += ": " + oneLine(audit.ClipText(e, 500))
		}
		msg += "]"
		rc.Error = msg
		if text != "" {
			text += "\n"
		}
		text += msg
	}
	return rc, text
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// catalog renders <available_skills> within the configured budget: in
// estimated tokens when catalog_budget_tokens is set, else in characters.
func (s *Service) catalog() string {
	if n := s.cfg.Skills.CatalogBudgetTokens; n > 0 {
		return skills.RenderAvailableTokens(s.skills.List(), n)
	}
	return skills.RenderAvailable(s.skills.List(), s.cfg.Skills.CatalogBudget)
}

// boundSkills are the skills a new session starts with: its agent's
// uses_skills, then the request's own, each once.
func (s *Service) boundSkills(p api.CreateSessionParams) ([]string, error) {
	var names []string
	if p.Agent != "" {
		a := s.cfg.Agents[p.Agent]
		if a == nil {
			known := make([]string, 0, len(s.cfg.Agents))
			for n := range s.cfg.Agents {
				known = append(known, n)
			}
			sort.Strings(known)
			list := "none are configured"
			if len(known) > 0 {
				list = "configured: " + strings.Join(known, ", ")
			}
			return nil, errkind.Errorf(errkind.NotFound, "no agent %q in the config (%s): add an agent block with uses_skills", p.Agent, list)
		}
		names = append(names, a.UsesSkills...)
	}
	for _, n := range p.UsesSkills {
		if err := skills.ValidName(n); err != nil {
			return nil, errkind.Errorf(errkind.InvalidParams, "uses_skills: %w", err)
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names, nil
}

// loadBound loads a new session's bound skills as skills.load would; if
// they cannot be loaded the session is closed again (audited) and the call
// fails with the load's error.
func (s *Service) loadBound(ctx context.Context, caller api.Peer, id, agent string, names []string) error {
	_, err := s.LoadSkills(ctx, caller, api.LoadParams{SessionID: id, Names: names, Mode: api.LoadReplace})
	if err == nil {
		return nil
	}
	if cerr := s.sessions.Close(id, caller.UID); cerr != nil {
		s.log.Error("cannot remove a session whose bound skills did not load", "session", id, "error", cerr)
	}
	r := base(ctx, caller, api.MethodSessionsCreate, audit.EventSessionClose, id)
	r.Outcome, r.Error = audit.OutcomeRefused, "bound skills did not load: "+err.Error()
	if agent != "" {
		r.Detail = map[string]string{"agent": agent}
	}
	s.record(ctx, r)
	what := "uses_skills"
	if agent != "" {
		what = fmt.Sprintf("the skills of agent %q", agent)
	}
	return fmt.Errorf("no session was created: %s could not be loaded: %w", what, err)
}
