package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/skills"
)

// Hooks of active skills run in the sandbox, never on the host: PreToolUse
// hooks when the host asks tools.check, PostToolUse hooks when it calls
// tools.report. A hook gets the event as JSON on stdin and answers the way
// Claude Code's command hooks do: exit 0 allows (stdout may carry a JSON
// decision), exit 2 blocks with stderr as the reason. Its answer is folded
// into policy's decision as one more vote, so a hook can deny or ask for
// confirmation but never allow what policy denies. A hook that fails to
// answer (another exit status, malformed JSON, a timeout) counts as the
// policy's hook_failure (deny by default: fail closed).

// hookOutputCap bounds what a hook may print.
const hookOutputCap = 64 << 10

// hookEvent is the JSON a hook reads on stdin.
type hookEvent struct {
	SessionID     string          `json:"session_id"`
	HookEventName string          `json:"hook_event_name"`
	ToolName      string          `json:"tool_name"`
	ToolInput     json.RawMessage `json:"tool_input"`
	ToolResponse  json.RawMessage `json:"tool_response,omitempty"`
	Skill         string          `json:"skill"`
	Cwd           string          `json:"cwd"`
}

// hookAnswer is the JSON decision a hook may print on stdout (both of
// Claude Code's shapes).
type hookAnswer struct {
	Continue           *bool  `json:"continue"`
	StopReason         string `json:"stopReason"`
	Decision           string `json:"decision"`
	Reason             string `json:"reason"`
	HookSpecificOutput *struct {
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason"`
	} `json:"hookSpecificOutput"`
}

// A hook is a run of its skill, through the one authorization path
// (Service.Run): the skill's lock, policy's decision, confirmation, a run
// slot, the skill's limits (tightened to the hook's) and run.start/run.end.
// Which tool policy decides it as (hookTools):
//   - a command that only runs a file of the skill ("./hooks/check.sh x",
//     "python3 hooks/guard.py") is skills.run_script with that path and
//     those args, exactly as if the model had asked to run the script;
//   - anything else is arbitrary shell with the skill mounted, so it is
//     decided both as skills.run_code (language shell) and as
//     skills.run_script with no path (a path-specific deny or confirm
//     matches it, a path-specific allow does not); the strictest wins.
// A hook policy denies is not run and counts as the rule's hook_failure. A
// hook policy holds for confirmation is not run: the call fails with
// confirmation_required naming every held hook's confirmation, and the
// host repeats it with confirmation_id(s) once they are approved; each
// approval is bound to its hook's run (command, skill version, event
// payload) and used once.

// hookCall is one tools.check or tools.report running hooks.
type hookCall struct {
	method, sessionID string
	confirmations     []string
	// held are the hooks that wait for an approver.
	held []*api.ConfirmationRequiredError
}

// maxHookConfirmations bounds the approvals one call may pass.
const maxHookConfirmations = 64

func newHookCall(method, sessionID, id string, ids []string) (*hookCall, error) {
	hc := &hookCall{method: method, sessionID: sessionID}
	if id != "" {
		hc.confirmations = append(hc.confirmations, id)
	}
	hc.confirmations = append(hc.confirmations, ids...)
	if len(hc.confirmations) > maxHookConfirmations {
		return nil, errkind.Errorf(errkind.InvalidParams, "%d confirmation ids, at most %d: pass only the ones this call's hooks asked for", len(hc.confirmations), maxHookConfirmations)
	}
	return hc, nil
}

// err is the call's error when hooks are held for confirmation: the first
// one's confirmation_required, with every id in its data.
func (hc *hookCall) err() error {
	if len(hc.held) == 0 {
		return nil
	}
	ids := make([]string, len(hc.held))
	for i, c := range hc.held {
		ids[i] = c.ID
	}
	var err error = hc.held[0]
	if len(ids) > 1 {
		err = fmt.Errorf("%d hooks wait for an approver (confirmations %s): approve each (confirmations.approve), then repeat this call with confirmation_ids %s; the first: %w",
			len(ids), strings.Join(ids, ", "), quoteList(ids), hc.held[0])
	}
	return api.MarkAudited(api.WithData(err, map[string]any{"confirmation_ids": ids}))
}

// preToolUseHooks runs the PreToolUse hooks of the session's active skills
// that match the tool; each answer is a decision.
func (s *Service) preToolUseHooks(ctx context.Context, caller api.Peer, ses *store.Session, p api.CheckToolParams) ([]policy.Decision, error) {
	call, err := newHookCall(api.MethodToolsCheck, p.SessionID, p.ConfirmationID, p.ConfirmationIDs)
	if err != nil {
		return nil, err
	}
	var decs []policy.Decision
	for _, sk := range s.hookSkills(ses) {
		if len(sk.HookErrors) > 0 {
			decs = append(decs, policy.Decision{Effect: policy.EffectDeny, Rule: fmt.Sprintf("hooks of skill %q", sk.Name),
				Reason: fmt.Sprintf("skill %q declares hooks that do not validate (%s); fix its SKILL.md (skillbox skills validate) or unload it", sk.Name, strings.Join(sk.HookErrors, "; "))})
			continue
		}
		for _, hc := range sk.Hooks.Matching(skills.HookPreToolUse, p.Tool) {
			_, dec, err := s.runHook(ctx, caller, call, sk, skills.HookPreToolUse, hc, p.Tool, p.Input, nil)
			if err != nil {
				return nil, err
			}
			decs = append(decs, dec)
		}
	}
	if err := call.err(); err != nil {
		return nil, err
	}
	return decs, nil
}

// ReportTool implements api.Service: policy decides the reported call as
// tools.check would (a call policy denies runs no hook), then the
// PostToolUse hooks of the active skills see it and its result.
func (s *Service) ReportTool(ctx context.Context, caller api.Peer, p api.ReportToolParams) (*api.ReportToolResult, error) {
	if p.Tool == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "tool is required, e.g. \"Bash\"")
	}
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	pol, err := s.decideHostTool(ctx, caller, api.MethodToolsReport, ses, p.Tool, p.Input)
	if err != nil {
		return nil, err
	}
	res := &api.ReportToolResult{Decision: string(pol.Effect), Rule: pol.Rule, Hooks: []api.HookRun{}}
	if pol.Effect == policy.EffectDeny {
		res.Block, res.Reason = true, "policy denies this call, so no hook ran: "+pol.Reason
		return res, nil
	}
	call, err := newHookCall(api.MethodToolsReport, p.SessionID, p.ConfirmationID, p.ConfirmationIDs)
	if err != nil {
		return nil, err
	}
	var reasons []string
	for _, sk := range s.hookSkills(ses) {
		for _, hc := range sk.Hooks.Matching(skills.HookPostToolUse, p.Tool) {
			hr, dec, err := s.runHook(ctx, caller, call, sk, skills.HookPostToolUse, hc, p.Tool, p.Input, p.Result)
			if err != nil {
				return nil, err
			}
			res.Hooks = append(res.Hooks, hr)
			if dec.Effect != policy.EffectAllow && hr.ConfirmationID == "" {
				res.Block = true
				reasons = append(reasons, dec.Reason)
			}
		}
	}
	if err := call.err(); err != nil {
		return nil, err
	}
	res.Reason = strings.Join(reasons, "; ")
	return res, nil
}

// hookSkills are the session's active skills as they were loaded (a skill
// changed since is left to tools.check's own refusal).
func (s *Service) hookSkills(ses *store.Session) []*skills.Skill {
	var out []*skills.Skill
	for _, a := range ses.Active {
		sk, err := s.skills.Get(a.Name)
		if err != nil || sk.Digest != a.Digest {
			continue
		}
		if sk.Hooks != nil || len(sk.HookErrors) > 0 {
			out = append(out, sk)
		}
	}
	return out
}

// hookTools is what policy decides a hook's run as (see the top of this
// file): the run's tool and input, and more tools for arbitrary shell.
func hookTools(sk *skills.Skill, hc skills.HookCommand) (string, []byte, []PolicyTool) {
	if sc, ok := hc.Script(); ok && isSkillFile(sk, sc.Path) {
		return api.MethodSkillsRunScript, toolInput(sc.Path, sc.Args), nil
	}
	script, _ := json.Marshal(map[string]any{"command": hc.Command})
	code, _ := json.Marshal(map[string]any{"language": api.LanguageShell, "code_sha256": runner.SHA256Hex([]byte(hc.Command)), "args": []string{}})
	return api.MethodSkillsRunScript, script, []PolicyTool{{Tool: api.MethodSkillsRunCode, Input: code}}
}

// isSkillFile reports whether rel is a regular file of the skill (a name
// an interpreter would otherwise find elsewhere is not the skill's).
func isSkillFile(sk *skills.Skill, rel string) bool {
	f, err := skills.OpenInRoot(sk.Dir, rel)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// runHook runs one hook in the sandbox and turns its answer into a
// decision, audited (the run's own records, and a policy.decision record
// naming the hook). A hook held for confirmation is added to call.held.
func (s *Service) runHook(ctx context.Context, caller api.Peer, call *hookCall, sk *skills.Skill, event string, hc skills.HookCommand, tool string, input, result json.RawMessage) (api.HookRun, policy.Decision, error) {
	pol := s.cfg.For(sk.Name)
	hp := pol.Hooks
	timeout := hp.Timeout
	if hc.Timeout > 0 && hc.Timeout < timeout {
		timeout = hc.Timeout
	}
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	payload, _ := json.Marshal(hookEvent{SessionID: call.sessionID, HookEventName: event, ToolName: tool, ToolInput: input,
		ToolResponse: result, Skill: sk.Name, Cwd: runtime.SkillMount})
	rule := fmt.Sprintf("hook %s of skill %q (%s)", event, sk.Name, audit.ClipText(hc.Command, 200))
	hr := api.HookRun{Skill: sk.Name, Event: event, Command: hc.Command, ExitCode: -1}

	effect, reason, failed := s.execHook(ctx, caller, call, sk, pol, event, hc, payload, timeout, &hr)
	if failed {
		why := reason
		switch hp.Failure {
		case policy.HookFailureIgnore:
			effect, reason = policy.EffectAllow, "hook failed and policy ignores failed hooks ("+hp.Rule+"): "+why
		case policy.HookFailureConfirm:
			effect, reason = policy.EffectConfirm, "hook failed, so an approver must confirm (hook_failure = \"confirm\", "+hp.Rule+"): "+why
		default:
			effect, reason = policy.EffectDeny, "hook failed, which counts as deny (fail closed): "+why
		}
	}
	dec := policy.Decision{Effect: effect, Rule: rule, Reason: reason}
	hr.Decision, hr.Message = string(effect), reason
	if event == skills.HookPostToolUse && effect == policy.EffectAllow {
		hr.Decision = ""
	}
	r := base(ctx, caller, call.method, audit.EventDecision, call.sessionID)
	r.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
	r.Decision = &audit.DecisionInfo{Tool: tool, Effect: string(effect), Rule: rule, Reason: audit.ClipText(reason, 1024), InputSHA256: runner.SHA256Hex(input)}
	r.Outcome = string(effect)
	r.Detail = map[string]string{"hook_event": event, "hook_command": audit.ClipText(hc.Command, 1024), "run_id": hr.RunID, "exit_code": fmt.Sprint(hr.ExitCode)}
	if hr.Reason != "" {
		r.Detail["run_reason"] = hr.Reason
	}
	if hr.ConfirmationID != "" {
		r.Detail["confirmation_id"] = hr.ConfirmationID
	}
	if err := s.record(ctx, r); err != nil {
		return hr, dec, err
	}
	return hr, dec, nil
}

// execHook runs the hook through Service.Run and reads its answer. failed
// reports a hook that gave none (reason says why); a hook held for
// confirmation did not run and is not a failure.
func (s *Service) execHook(ctx context.Context, caller api.Peer, call *hookCall, sk *skills.Skill, pol *policy.SkillPolicy, event string, hc skills.HookCommand, payload []byte, timeout time.Duration, hr *api.HookRun) (effect policy.Effect, reason string, failed bool) {
	req := RunRequest{
		Skill:   sk,
		Command: &CommandSpec{Command: hc.Command, Label: "hooks." + event, InSkillDir: true},
		Stdin:   payload,
		Limits:  commandLimits(timeout, hookOutputCap),
	}
	tool, input, also := hookTools(sk, hc)
	out, err := s.Run(ctx, caller, req, RunOptions{Method: call.method, SessionID: call.sessionID, Tool: tool, ToolInput: input,
		AlsoTools: also, ConfirmationIDs: call.confirmations, Policy: pol})
	if err != nil {
		var ce *api.ConfirmationRequiredError
		if errors.As(err, &ce) {
			call.held = append(call.held, ce)
			hr.ConfirmationID = ce.ID
			return policy.EffectConfirm, fmt.Sprintf("the hook was not run: it waits for an approver's confirmation %s (%s)", ce.ID, ce.Rule), false
		}
		if errors.Is(err, errkind.Denied) {
			return "", "policy does not let the hook run: " + err.Error(), true
		}
		return "", "the hook was not run: " + err.Error(), true
	}
	r := out.Result
	hr.RunID, hr.ExitCode, hr.Reason = out.RunID, r.ExitCode, string(r.Reason)
	stderr := strings.TrimSpace(string(r.Stderr))
	switch {
	case r.Reason == runtime.ReasonTimeout:
		return "", fmt.Sprintf("the hook did not answer within %s and was killed (run %s)", out.Plan.Limits().Timeout, out.RunID), true
	case r.Reason != runtime.ReasonExit:
		return "", fmt.Sprintf("the hook ended by %s (run %s)", r.Reason, out.RunID), true
	case r.ExitCode == 2:
		if stderr == "" {
			stderr = "blocked by the hook (no reason given)"
		}
		return policy.EffectDeny, audit.ClipText(stderr, 2048), false
	case r.ExitCode != 0:
		msg := fmt.Sprintf("the hook exited with status %d (run %s)", r.ExitCode, out.RunID)
		if stderr != "" {
			msg += ": " + audit.ClipText(stderr, 500)
		}
		return "", msg, true
	}
	stdout := strings.TrimSpace(string(r.Stdout))
	if !strings.HasPrefix(stdout, "{") {
		return policy.EffectAllow, "the hook allowed it (exit 0)", false
	}
	if r.StdoutTruncated {
		return "", "the hook's JSON answer is larger than the output cap", true
	}
	var a hookAnswer
	if err := json.Unmarshal([]byte(stdout), &a); err != nil {
		return "", "the hook printed malformed JSON: " + err.Error(), true
	}
	return a.effect()
}

// effect maps a hook's JSON answer to a decision.
func (a *hookAnswer) effect() (policy.Effect, string, bool) {
	if a.Continue != nil && !*a.Continue {
		return policy.EffectDeny, nonEmpty(a.StopReason, "the hook stopped it (continue: false)"), false
	}
	if h := a.HookSpecificOutput; h != nil && h.PermissionDecision != "" {
		why := h.PermissionDecisionReason
		switch h.PermissionDecision {
		case "deny":
			return policy.EffectDeny, nonEmpty(why, "denied by the hook"), false
		case "ask":
			return policy.EffectConfirm, nonEmpty(why, "the hook asks for confirmation"), false
		case "allow":
			return policy.EffectAllow, nonEmpty(why, "allowed by the hook"), false
		}
		return "", fmt.Sprintf("the hook answered permissionDecision %q (use allow, deny or ask)", h.PermissionDecision), true
	}
	switch a.Decision {
	case "block", "deny":
		return policy.EffectDeny, nonEmpty(a.Reason, "blocked by the hook"), false
	case "", "approve", "allow":
		return policy.EffectAllow, nonEmpty(a.Reason, "the hook allowed it"), false
	case "ask":
		return policy.EffectConfirm, nonEmpty(a.Reason, "the hook asks for confirmation"), false
	}
	return "", fmt.Sprintf("the hook answered decision %q (use approve or block)", a.Decision), true
}

func nonEmpty(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}
