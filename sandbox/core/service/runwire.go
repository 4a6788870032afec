package service

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/skills"
)

// RunCode implements api.Service: the code runs with every active skill
// of the session mounted.
func (s *Service) RunCode(ctx context.Context, caller api.Peer, p api.RunCodeParams) (*api.RunScriptResult, error) {
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	if len(ses.Active) == 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "no skill is loaded in this session: call skills.load with the skills the code uses first")
	}
	var sks []*skills.Skill
	for _, a := range ses.Active {
		sk, err := s.activeSkill(ses, a.Name)
		if err != nil {
			return nil, err
		}
		sks = append(sks, sk)
	}
	req := RunRequest{Code: &CodeRequest{Language: p.Language, Code: []byte(p.Code), Skills: sks}}
	return s.runWire(ctx, caller, api.MethodSkillsRunCode, req, p.RunInputs)
}

// runWire completes req with the wire's run inputs, runs it as method
// and returns the wire result.
func (s *Service) runWire(ctx context.Context, caller api.Peer, method string, req RunRequest, w api.RunInputs) (*api.RunScriptResult, error) {
	files, err := decodeFiles(w.Files)
	if err != nil {
		return nil, err
	}
	if w.TimeoutMS < 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "timeout_ms must not be negative")
	}
	o := RunOptions{Method: method, SessionID: w.SessionID, ConfirmationID: w.ConfirmationID, Stream: w.Stream}
	req.Args, req.Env, req.Stdin, req.Files = w.Args, w.Env, []byte(w.Stdin), files
	req.Limits = runtime.Limits{Timeout: time.Duration(w.TimeoutMS) * time.Millisecond}
	req.Background = w.Background
	if w.Background && w.Workspace == "" {
		// A background run has no end to write changes back at: it
		// works in its sandbox's /work, without the session workspace.
	} else if w.Workspace == "" || w.Workspace == SessionWorkspaceName {
		// A run that names no directory works in its session's own, once
		// the session has one.
		req.Workspace, err = s.sessionWorkspaceRequest(o.SessionID, w.Inputs, w.Workspace == SessionWorkspaceName)
	} else {
		req.Workspace, err = s.hostWorkspace(caller, w.WorkspaceParams)
	}
	if err != nil {
		return nil, err
	}
	if req.Background {
		st, err := s.Start(ctx, caller, req, o)
		if err != nil {
			return nil, err
		}
		res := backgroundResult(st)
		return &res, nil
	}
	out, err := s.Run(ctx, caller, req, o)
	if err != nil {
		return nil, err
	}
	res := ResultOf(out, api.MaxInlineOutputBytes)
	return &res, nil
}

// decideRun asks policy about a run: skills.run_script for its skill, or
// skills.run_code for every skill a code run mounts (each decision is
// audited; the strictest wins, and any deny ends the call).
func (s *Service) decideRun(ctx context.Context, caller api.Peer, o RunOptions, req RunRequest, pol *policy.SkillPolicy) (policy.Decision, error) {
	if req.Code == nil {
		tool, input := api.MethodSkillsRunScript, toolInput(req.Script, req.Args)
		if o.Tool != "" {
			tool, input = o.Tool, o.ToolInput
		}
		dec, err := s.decideTool(ctx, caller, o.Method, o.SessionID, req.Skill, pol, tool, input)
		for _, t := range o.AlsoTools {
			if err != nil {
				break
			}
			var d policy.Decision
			d, err = s.decideTool(ctx, caller, o.Method, o.SessionID, req.Skill, pol, t.Tool, t.Input)
			dec = policy.Strictest(dec, d)
		}
		return dec, err
	}
	c := req.Code
	if err := runner.CheckLanguage(c.Language); err != nil {
		return policy.Decision{}, err
	}
	if len(c.Skills) == 0 {
		return policy.Decision{}, errkind.Errorf(errkind.InvalidParams, "no skill to run the code with: load the skills it uses first")
	}
	input, _ := json.Marshal(map[string]any{"language": c.Language, "code_sha256": runner.SHA256Hex(c.Code), "args": req.Args})
	decs := make([]policy.Decision, 0, len(c.Skills))
	for i, sk := range c.Skills {
		d, err := s.decideTool(ctx, caller, o.Method, o.SessionID, sk, pol.Parts()[i], api.MethodSkillsRunCode, input)
		if err != nil {
			return d, err
		}
		decs = append(decs, d)
	}
	return policy.Strictest(decs...), nil
}

// runSkills are the skills a run mounts: its skill, or a code run's.
func runSkills(req RunRequest) []*skills.Skill {
	if req.Code != nil {
		return req.Code.Skills
	}
	return []*skills.Skill{req.Skill}
}

// planWhat says what a confirmation is asked for.
func planWhat(p *Plan) string {
	if p.Code() != nil {
		return fmt.Sprintf("running %s code with skills %s", p.Code().Language, codeSkillNames(p.Code()))
	}
	return fmt.Sprintf("running scripts of skill %q", p.Request().Skill.Name)
}

// confirmDetails is what an approver is shown of a run besides the reason.
func confirmDetails(p *Plan) map[string]string {
	req := p.Request()
	d := map[string]string{"args": strings.Join(runner.QuoteAll(req.Args), " "), "network": fmt.Sprint(p.Network())}
	if len(p.Egress()) > 0 {
		d["egress"] = strings.Join(p.EgressNames(), " ")
	}
	if c := p.Code(); c != nil {
		mounts := make([]string, len(c.Mounts))
		for i, m := range c.Mounts {
			mounts[i] = m.Skill.Name + "@" + m.Skill.Digest
		}
		code := audit.NewCodeInfo(c.Language, c.Code, true, audit.MaxCodeText)
		d["skills"], d["language"], d["code_sha256"] = strings.Join(mounts, " "), c.Language, c.SHA256
		var notes []string
		if code.Truncated {
			notes = append(notes, fmt.Sprintf("%d bytes, the first %d shown", code.Size, audit.MaxCodeText))
		}
		if code.Encoding != "" {
			notes = append(notes, "not UTF-8, shown as "+code.Encoding)
		}
		d["code"] = code.Text
		if len(notes) > 0 {
			d["code"] = "(" + strings.Join(notes, "; ") + ") " + code.Text
		}
	} else {
		d["skill"], d["skill_digest"], d["script"], d["script_sha256"] = req.Skill.Name, req.Skill.Digest, p.Script(), p.ScriptSHA256()
		if req.Command != nil {
			// A hook or !`command`: the approver sees what it runs.
			d["command"] = audit.ClipText(req.Command.Command, audit.MaxCodeText)
		}
	}
	if names, _ := audit.EnvSummary(req.Env); len(names) > 0 {
		d["env_names"] = strings.Join(names, " ")
	}
	if refs := runner.InputRefs(req.Files); len(refs) > 0 {
		// One line per input: what the approval binds (the digest covers
		// the files' content).
		lines := make([]string, len(refs))
		for i, r := range refs {
			switch {
			case r.Type == string(runtime.InputSymlink):
				lines[i] = fmt.Sprintf("%s -> %s", strconv.Quote(r.Path), strconv.Quote(r.Target))
			case r.Type != "":
				lines[i] = fmt.Sprintf("%s (%s)", strconv.Quote(r.Path), r.Type)
			default:
				lines[i] = fmt.Sprintf("%s %d bytes sha256:%s", strconv.Quote(r.Path), r.Size, r.SHA256)
			}
		}
		d["inputs"] = strings.Join(lines, "\n")
	}
	return d
}

// skillMounts says where skills.run_code mounts each of the active skills
// act, for sessions.instructions: the structured list, and the text the
// model reads ("" when no skill is active).
func skillMounts(act []*skills.Skill) ([]api.MountedSkill, string) {
	if len(act) == 0 {
		return nil, ""
	}
	var b strings.Builder
	b.WriteString("\nWith skills.run_code you can run code you write (language python, shell or node) in a fresh sandbox " +
		"where every active skill is mounted read-only and on the module path (PYTHONPATH, NODE_PATH), " +
		"so `from core.x import y` imports a skill's core/x.py; the working directory is /work, and the files the code " +
		"creates or changes there are returned. The skills are mounted at:\n")
	out := make([]api.MountedSkill, len(act))
	for i, sk := range act {
		out[i] = api.MountedSkill{Name: sk.Name, Path: runtime.SkillTarget(sk.Name), Digest: sk.Digest}
		fmt.Fprintf(&b, "- %s: %s\n", sk.Name, out[i].Path)
	}
	return out, b.String()
}

// egressWhat describes a plan's destinations for a confirmation.
func egressWhat(p *Plan) string {
	return fmt.Sprintf("network access for skill %q to %s", p.Request().Skill.Name, strings.Join(p.EgressNames(), ", "))
}

// egressGrants remembers, per session, the (skill, destination) pairs an
// approver has approved network access to (confirm = ["network"]), so a
// session is asked once per destination, not on every run. Bounded: when
// full, nothing more is remembered and runs ask again.
type egressGrants struct {
	mu sync.Mutex
	m  map[string]map[string]bool // session -> skill "\x00" destination
	n  int
}

const maxEgressGrants = 10000

func grantKey(skill, dest string) string { return skill + "\x00" + dest }

// covers reports whether every destination was approved for skill in session.
func (g *egressGrants) covers(session, skill string, dests []string) bool {
	if session == "" || len(dests) == 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range dests {
		if !g.m[session][grantKey(skill, d)] {
			return false
		}
	}
	return true
}

func (g *egressGrants) grant(session, skill string, dests []string) {
	if session == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]map[string]bool{}
	}
	for _, d := range dests {
		k := grantKey(skill, d)
		if g.m[session][k] || g.n >= maxEgressGrants {
			continue
		}
		if g.m[session] == nil {
			g.m[session] = map[string]bool{}
		}
		g.m[session][k] = true
		g.n++
	}
}

// forget drops a session's grants (it closed or expired).
func (g *egressGrants) forget(session string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n -= len(g.m[session])
	delete(g.m, session)
}

// loadDeps starts the layer builds of the skills just loaded and puts what
// they declare into the receipt.
func (s *Service) loadDeps(found []*skills.Skill, res *api.LoadResult) {
	if s.engine == nil || s.engine.Deps() == nil {
		return
	}
	for _, sk := range found {
		// Warming skipped the skill's scripts whose layer was not built;
		// once it is, they are warmed with it.
		info := s.engine.Deps().OnLoad(sk, func() { s.engine.WarmSkills([]*skills.Skill{sk}) })
		if info == nil {
			continue
		}
		for i := range res.ActiveSkills {
			if res.ActiveSkills[i].Name == sk.Name {
				res.ActiveSkills[i].Dependencies = info
			}
		}
	}
}

// CheckSkill implements api.Service (skills.check): a static check of the
// skill's scripts against the images they run in and its dependency layer.
// It reads files only and never builds an image or a layer: a family whose
// image is not built is reported as skipped.
func (s *Service) CheckSkill(ctx context.Context, caller api.Peer, p api.CheckSkillParams) (*api.CheckSkillResult, error) {
	if p.Skill == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "skill is required: name a skill from skills.list")
	}
	if err := skills.ValidName(p.Skill); err != nil {
		return nil, errkind.Wrap(errkind.InvalidParams, err)
	}
	sk, err := s.skills.Get(p.Skill)
	if err != nil {
		return nil, errkind.Errorf(errkind.NotFound, "no skill named %q: call skills.list to see the available names", p.Skill)
	}
	if s.engine == nil {
		return nil, errkind.Errorf(errkind.Unavailable, "this service runs nothing, so it has no images to check against")
	}
	return s.engine.CheckSkill(ctx, sk)
}

// decide asks the policy about a tool for a skill and audits the decision.
func (s *Service) decide(ctx context.Context, sk *skills.Skill, pol *policy.SkillPolicy, tool string, input []byte, rec audit.Record) (policy.Decision, error) {
	d, r := s.decision(sk, pol, tool, input, rec)
	if err := s.record(ctx, r); err != nil {
		return d, err
	}
	return d, nil
}

// decision is decide without writing its record. pol is sk's policy
// (policy.Config.For).
func (s *Service) decision(sk *skills.Skill, pol *policy.SkillPolicy, tool string, input []byte, rec audit.Record) (policy.Decision, *audit.Record) {
	d := pol.Decide(policy.Request{Skill: sk.Name, AllowedTools: sk.AllowedTools, Source: sk.Location, Tool: tool, Input: input})
	rec.Event = audit.EventDecision
	rec.Skill = &audit.SkillRef{Name: sk.Name, Digest: sk.Digest}
	rec.Decision = &audit.DecisionInfo{Tool: tool, Effect: string(d.Effect), Rule: d.Rule, Reason: d.Reason, Mode: string(s.cfg.Daemon.ToolMode)}
	if len(input) > 0 {
		rec.Decision.InputSHA256 = runner.SHA256Hex(input)
	}
	rec.Outcome = string(d.Effect)
	return d, &rec
}

// commandLimits are the limits a command asks for: a short timeout and a
// small output cap (the policy's may only be stricter).
func commandLimits(timeout time.Duration, output int64) runtime.Limits {
	return runtime.Limits{Timeout: timeout, StdoutBytes: output, StderrBytes: output}
}

// codeSkillNames lists the skills a code run mounts, quoted, for messages.
func codeSkillNames(c *runner.CodePlan) string {
	names := make([]string, len(c.Mounts))
	for i, m := range c.Mounts {
		names[i] = m.Skill.Name
	}
	return quoteList(names)
}

// ResultOf turns a finished run into its wire form (skills.run_script's
// result). Output contents are inlined (base64), in path order, while their
// bytes fit in inlineBudget (api.MaxInlineOutputBytes on the socket; 0
// inlines none); every output past the budget keeps its path, size and
// sha256 and is marked ContentOmitted, and OutputsNotInlined counts them.
func ResultOf(o *Finished, inlineBudget int64) api.RunScriptResult {
	r := &o.Result
	res := api.RunScriptResult{
		RunID: o.RunID, Path: o.Plan.Script(), Summary: wireSummary(r.Summary),
		Stdout: string(r.Stdout), Stderr: string(r.Stderr), DurationMS: r.Duration.Milliseconds(),
		Image: o.Image.Name, ImageDigest: o.Image.Digest, Skills: o.Plan.Code().MountedSkills(),
		DepsLayer: o.DepsLayer, Hint: o.Hint, Warnings: o.Warnings,
	}
	if e := r.Egress; e != nil {
		res.Egress = &api.EgressSummary{Connections: e.Connections, Denied: e.Denied, BytesOut: e.BytesOut, BytesIn: e.BytesIn, LimitHit: e.LimitHit}
	}
	if sk := o.Plan.Request().Skill; sk != nil {
		res.Skill, res.SkillDigest = sk.Name, sk.Digest
	}
	res.Network, res.ConfirmationID = o.Plan.Network(), o.ConfirmationID
	res.Limits = o.Plan.Limits().Map()
	res.Outputs = []api.Output{} // present, empty or not, as wireSummary's lists
	res.Workspace = o.Workspace
	if o.Plan.Isolation() == policy.IsolationSession {
		res.Isolation, res.SessionSandbox = string(o.Plan.Isolation()), o.SessionSandbox
	}
	left := inlineBudget
	for _, f := range r.Outputs {
		out := api.Output{Path: f.Path, Size: f.Size, SHA256: f.SHA256}
		if int64(len(f.Data)) <= left && res.OutputsNotInlined == 0 {
			out.Content = base64.StdEncoding.EncodeToString(f.Data)
			left -= int64(len(f.Data))
		} else {
			out.ContentOmitted = true
			res.OutputsNotInlined++
		}
		res.Outputs = append(res.Outputs, out)
	}
	return res
}

// wireSummary is a run's summary as a run result carries it: every list
// present, empty or not, so that a reader need not tell null from [].
func wireSummary(s outcome.Summary) outcome.Summary {
	s.OutputsSkipped = append([]string{}, s.OutputsSkipped...)
	s.Deleted = append([]string{}, s.Deleted...)
	return s
}
