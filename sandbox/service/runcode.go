package service

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/audit"
	"github.com/skillbox/skillbox/sandbox/store"
	"github.com/skillbox/skillbox/skills"
)

// skills.run_code runs code the caller wrote instead of a file of a skill.
// It takes the same path as a script run (Service.Run: policy, confirmation,
// audit, the engine), with these differences: the policy tool is
// skills.run_code, decided for every mounted skill (the strictest decision
// wins, each one audited); every skill is mounted read-only at
// runtime.SkillTarget(name) from its pinned copy and is on the module path;
// the code is written read-only to runtime.ProgramDir; the language picks
// the image as an extension would; the limits are the strictest of every
// skill's; there is no network. The approval digest binds the session, the
// skills and their digests, the language, the code's sha256, and what a
// script run's digest binds (args, env, stdin, files, limits).

// CodeRequest is the part of a RunRequest that makes it a skills.run_code
// run (RunRequest.Skill and Script stay empty).
type CodeRequest struct {
	Language string // api.LanguagePython, api.LanguageShell, api.LanguageNode
	Code     []byte
	// Skills are mounted in this order (the session's load order), which
	// is also their order on the module path.
	Skills []*skills.Skill
}

// CodePlan is what Prepare resolved for a code run.
type CodePlan struct {
	Language string
	Code     []byte
	SHA256   string
	Mounts   []SkillMountPlan
	Program  *runtime.Program
	// ModuleEnv puts every mounted skill's root on the module path.
	ModuleEnv []string
}

// SkillMountPlan is one skill a code run mounts: its pinned copy Root at
// Path in the sandbox.
type SkillMountPlan struct {
	Skill *skills.Skill
	Root  string
	Path  string
}

// languageExtensions maps a run_code language to the extension whose
// configured image runs it (the config's image blocks decide, as for a
// script).
var languageExtensions = map[string]string{
	api.LanguagePython: ".py",
	api.LanguageShell:  ".sh",
	api.LanguageNode:   ".js",
}

// codeProgramName is the file the code is written to, by language.
func codeProgramName(language string) (string, error) {
	ext, ok := languageExtensions[language]
	if !ok {
		return "", fmt.Errorf("%w: language %q: use %q, %q or %q", api.ErrInvalidParams, language, api.LanguagePython, api.LanguageShell, api.LanguageNode)
	}
	return "main" + ext, nil
}

// RunCode implements api.Service: the code runs with every active skill
// of the session mounted.
func (s *Service) RunCode(ctx context.Context, caller api.Peer, p api.RunCodeParams) (*api.RunScriptResult, error) {
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	if len(ses.Active) == 0 {
		return nil, fmt.Errorf("%w: no skill is loaded in this session: call skills.load with the skills the code uses first", api.ErrInvalidParams)
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
	return s.runWire(ctx, caller, req, p.Args, p.Env, p.Stdin, p.Files, p.TimeoutMS, RunOptions{
		Method: api.MethodSkillsRunCode, SessionID: p.SessionID, ConfirmationID: p.ConfirmationID, Stream: p.Stream,
	})
}

// runWire completes req with the run parameters skills.run_script and
// skills.run_code share, as they come over the wire, runs it and returns
// the wire result.
func (s *Service) runWire(ctx context.Context, caller api.Peer, req RunRequest, args []string, env map[string]string, stdin string, in []api.File, timeoutMS int64, o RunOptions) (*api.RunScriptResult, error) {
	files, err := decodeFiles(in)
	if err != nil {
		return nil, err
	}
	if timeoutMS < 0 {
		return nil, fmt.Errorf("%w: timeout_ms must not be negative", api.ErrInvalidParams)
	}
	req.Args, req.Env, req.Stdin, req.Files = args, env, []byte(stdin), files
	req.Limits = runtime.Limits{Timeout: time.Duration(timeoutMS) * time.Millisecond}
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
func (s *Service) decideRun(ctx context.Context, caller api.Peer, o RunOptions, req RunRequest) (policy.Decision, error) {
	if req.Code == nil {
		tool, input := api.MethodSkillsRunScript, toolInput(req.Script, req.Args)
		if o.Tool != "" {
			tool, input = o.Tool, o.ToolInput
		}
		dec, err := s.decideTool(ctx, caller, o.Method, o.SessionID, req.Skill, tool, input)
		for _, t := range o.AlsoTools {
			if err != nil {
				break
			}
			var d policy.Decision
			d, err = s.decideTool(ctx, caller, o.Method, o.SessionID, req.Skill, t.Tool, t.Input)
			dec = policy.Strictest(dec, d)
		}
		return dec, err
	}
	c := req.Code
	if _, err := codeProgramName(c.Language); err != nil {
		return policy.Decision{}, err
	}
	if len(c.Skills) == 0 {
		return policy.Decision{}, fmt.Errorf("%w: no skill to run the code with: load the skills it uses first", api.ErrInvalidParams)
	}
	input, _ := json.Marshal(map[string]any{"language": c.Language, "code_sha256": sha256Hex(c.Code), "args": req.Args})
	decs := make([]policy.Decision, 0, len(c.Skills))
	for _, sk := range c.Skills {
		d, err := s.decideTool(ctx, caller, o.Method, o.SessionID, sk, api.MethodSkillsRunCode, input)
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

// prepareCode is Prepare for a code run.
func (e *Engine) prepareCode(req RunRequest) (*Plan, error) {
	c := req.Code
	name, err := codeProgramName(c.Language)
	if err != nil {
		return nil, err
	}
	if len(c.Code) == 0 {
		return nil, fmt.Errorf("%w: code is empty", api.ErrInvalidParams)
	}
	if len(c.Code) > runtime.MaxProgramBytes {
		return nil, fmt.Errorf("%w: code is %d bytes, at most %d: put large code in a skill instead", api.ErrInvalidParams, len(c.Code), runtime.MaxProgramBytes)
	}
	if req.Network {
		return nil, fmt.Errorf("%w: skills.run_code runs without network", api.ErrInvalidParams)
	}
	if len(c.Skills) == 0 {
		return nil, fmt.Errorf("%w: no skill to run the code with: load the skills it uses first", api.ErrInvalidParams)
	}
	if e.Pins == nil {
		return nil, fmt.Errorf("%w: the engine has no skill snapshot store", api.ErrUnavailable)
	}
	interp, err := e.Config.Interpreter(name, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: language %q: %v", api.ErrInvalidParams, c.Language, err)
	}

	cp := &CodePlan{Language: c.Language, Code: c.Code, SHA256: sha256Hex(c.Code), Program: &runtime.Program{Name: name, Data: c.Code}}
	var limits runtime.Limits
	var rules, dirs []string
	seen := map[string]bool{}
	for i, sk := range c.Skills {
		if sk == nil || seen[sk.Name] {
			return nil, fmt.Errorf("%w: skill %d of the code run is missing or given twice", api.ErrInvalidParams, i)
		}
		seen[sk.Name] = true
		// The pinned copy: what is mounted is the version that was
		// decided on and approved, whatever happens to its directory.
		root, err := e.Pins.Pin(sk)
		if err != nil {
			return nil, err
		}
		target := runtime.SkillTarget(sk.Name)
		cp.Mounts = append(cp.Mounts, SkillMountPlan{Skill: sk, Root: root, Path: target})
		dirs = append(dirs, target)
		l, r := e.Config.LimitsFor(sk.Name)
		if i == 0 {
			limits = l
		} else {
			limits = policy.Tighten(limits, l)
		}
		for _, x := range r {
			if !seen["rule "+x] {
				seen["rule "+x] = true
				rules = append(rules, x)
			}
		}
	}
	cp.ModuleEnv = runtime.ModulePathEnvDirs(interp.Image, dirs...)
	limits = policy.Tighten(limits, req.Limits)

	env, err := envList(req.Env)
	if err != nil {
		return nil, err
	}
	// Code sees every mounted skill, so each of their rules must allow
	// what it is given.
	names := make([]string, 0, len(c.Skills))
	for _, sk := range c.Skills {
		names = append(names, sk.Name)
	}
	if err := e.checkEnv(env, req.Env, names...); err != nil {
		return nil, err
	}
	argv := append(append([]string{}, interp.Argv...), cp.Program.Path())
	argv = append(argv, req.Args...)

	runID := newID("run_")
	jobID := runtime.IDPrefix + strings.TrimPrefix(runID, "run_")
	job := runtime.Job{ID: jobID, RootFS: "/", Args: argv, Env: env, Files: req.Files, Limits: limits}
	cp.applyTo(&job)
	if err := runtime.ValidateJob(job); err != nil {
		return nil, fmt.Errorf("%w: %v", api.ErrInvalidParams, err)
	}
	p := &Plan{
		RunID:        runID,
		JobID:        jobID,
		Request:      req,
		Script:       cp.Program.Path(),
		ScriptSHA256: cp.SHA256,
		Interpreter:  interp,
		Argv:         argv,
		Env:          env,
		Limits:       limits,
		LimitRules:   rules,
		Code:         cp,
	}
	p.Digest = codeDigest(p)
	return p, nil
}

// codeDigest binds an approval to exactly one code run: the session, the
// skills it mounts and their versions, the language and code, and what it
// is given and runs under (as a script run's digest).
func codeDigest(p *Plan) string {
	req, c := p.Request, p.Code
	mounts := make([]string, len(c.Mounts))
	for i, m := range c.Mounts {
		mounts[i] = m.Skill.Name + "@" + m.Skill.Digest + "=" + m.Path
	}
	return store.RequestDigest(append([]string{
		"tool", api.MethodSkillsRunCode,
		"session", req.SessionID,
		"skills", strings.Join(mounts, " "),
		"language", c.Language,
		"code_sha256", c.SHA256,
	}, runDigestFields(p)...)...)
}

// applyTo adds the code run's mounts, program and module path to job; a
// nil plan (a script run) adds nothing.
func (c *CodePlan) applyTo(job *runtime.Job) {
	if c == nil {
		return
	}
	job.Skills = make([]runtime.SkillBind, len(c.Mounts))
	for i, m := range c.Mounts {
		job.Skills[i] = runtime.SkillBind{Source: m.Root, Target: m.Path}
	}
	job.Program = c.Program
	job.ModuleEnv = c.ModuleEnv
}

// auditSkills are the mounted skills as audit records name them.
func (c *CodePlan) auditSkills() []audit.SkillRef {
	if c == nil {
		return nil
	}
	out := make([]audit.SkillRef, len(c.Mounts))
	for i, m := range c.Mounts {
		out[i] = audit.SkillRef{Name: m.Skill.Name, Digest: m.Skill.Digest, Location: m.Skill.Location, Path: m.Path}
	}
	return out
}

// auditCode is the code as audit records keep it: with the text (capped at
// audit.MaxCodeText) or only its size and hash.
func (c *CodePlan) auditCode(withText bool) *audit.CodeInfo {
	if c == nil {
		return nil
	}
	return audit.NewCodeInfo(c.Language, c.Code, withText, audit.MaxCodeText)
}

// resultSkills are the mounts as the result names them.
func (c *CodePlan) resultSkills() []api.MountedSkill {
	if c == nil {
		return nil
	}
	out := make([]api.MountedSkill, len(c.Mounts))
	for i, m := range c.Mounts {
		out[i] = api.MountedSkill{Name: m.Skill.Name, Path: m.Path, Digest: m.Skill.Digest}
	}
	return out
}

// skillNames lists the mounted skills, quoted, for messages.
func (c *CodePlan) skillNames() string {
	names := make([]string, len(c.Mounts))
	for i, m := range c.Mounts {
		names[i] = m.Skill.Name
	}
	return quoteList(names)
}

// auditSkill is the one skill a script run's records name (nil for a code
// run, whose records list Skills).
func (p *Plan) auditSkill() *audit.SkillRef {
	sk := p.Request.Skill
	if sk == nil {
		return nil
	}
	return &audit.SkillRef{Name: sk.Name, Digest: sk.Digest, Location: sk.Location}
}

// skillName names the run's skill(s) for logs and events.
func (p *Plan) skillName() string {
	if p.Code != nil {
		names := make([]string, len(p.Code.Mounts))
		for i, m := range p.Code.Mounts {
			names[i] = m.Skill.Name
		}
		return strings.Join(names, ",")
	}
	return p.Request.Skill.Name
}

// what says what a confirmation is asked for.
func (p *Plan) what() string {
	if p.Code != nil {
		return fmt.Sprintf("running %s code with skills %s", p.Code.Language, p.Code.skillNames())
	}
	return fmt.Sprintf("running scripts of skill %q", p.Request.Skill.Name)
}

// confirmDetails is what an approver is shown of a run besides the reason.
func (p *Plan) confirmDetails() map[string]string {
	req := p.Request
	d := map[string]string{"args": strings.Join(quoteAll(req.Args), " "), "network": fmt.Sprint(p.Network)}
	if len(p.Egress) > 0 {
		d["egress"] = strings.Join(p.egressNames(), " ")
	}
	if c := p.Code; c != nil {
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
		d["skill"], d["skill_digest"], d["script"], d["script_sha256"] = req.Skill.Name, req.Skill.Digest, p.Script, p.ScriptSHA256
		if req.Command != nil {
			// A hook or !`command`: the approver sees what it runs.
			d["command"] = ClipText(req.Command.Command, audit.MaxCodeText)
		}
	}
	if names, _ := audit.EnvSummary(req.Env); len(names) > 0 {
		d["env_names"] = strings.Join(names, " ")
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

// LanguageForFile is the run_code language of a code file by its name (its
// extension), the way the config maps extensions to images: the language
// whose own extension runs in the same image. "" when none does.
func LanguageForFile(cfg *policy.Config, name string) string {
	in, err := cfg.Interpreter(name, nil)
	if err != nil {
		return ""
	}
	for _, lang := range []string{api.LanguagePython, api.LanguageShell, api.LanguageNode} {
		if l, err := cfg.Interpreter("main"+languageExtensions[lang], nil); err == nil && l.Image == in.Image {
			return lang
		}
	}
	return ""
}
