package runner

import (
	"strings"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/store"
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
		return "", errkind.Errorf(errkind.InvalidParams, "language %q: use %q, %q or %q", language, api.LanguagePython, api.LanguageShell, api.LanguageNode)
	}
	return "main" + ext, nil
}

// prepareCode is Prepare for a code run.
func (e *Engine) prepareCode(req RunRequest, pol *policy.SkillPolicy) (*Plan, error) {
	c := req.Code
	name, err := codeProgramName(c.Language)
	if err != nil {
		return nil, err
	}
	if len(c.Code) == 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "code is empty")
	}
	if len(c.Code) > runtime.MaxProgramBytes {
		return nil, errkind.Errorf(errkind.InvalidParams, "code is %d bytes, at most %d: put large code in a skill instead", len(c.Code), runtime.MaxProgramBytes)
	}
	if req.Network {
		return nil, errkind.Errorf(errkind.InvalidParams, "skills.run_code runs without network")
	}
	if len(c.Skills) == 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "no skill to run the code with: load the skills it uses first")
	}
	if e.pins == nil {
		return nil, errkind.Errorf(errkind.Unavailable, "the engine has no skill snapshot store")
	}
	interp, err := e.interpreterFor(name, c.Code)
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidParams, "language %q: %w", c.Language, err)
	}

	cp := &CodePlan{Language: c.Language, Code: c.Code, SHA256: SHA256Hex(c.Code), Program: &runtime.Program{Name: name, Data: c.Code}}
	var dirs []string
	seen := map[string]bool{}
	for i, sk := range c.Skills {
		if sk == nil || seen[sk.Name] {
			return nil, errkind.Errorf(errkind.InvalidParams, "skill %d of the code run is missing or given twice", i)
		}
		seen[sk.Name] = true
		// The pinned copy: what is mounted is the version that was
		// decided on and approved, whatever happens to its directory.
		root, err := e.pins.Pin(sk)
		if err != nil {
			return nil, err
		}
		target := runtime.SkillTarget(sk.Name)
		cp.Mounts = append(cp.Mounts, SkillMountPlan{Skill: sk, Root: root, Path: target})
		dirs = append(dirs, target)
	}
	cp.ModuleEnv = runtime.ModulePathEnvDirs(interp.Image, dirs...)
	// The strictest of every skill's limits (policy.StrictestPolicy).
	limits, rules := policy.Tighten(pol.Limits.Value, req.Limits), pol.Limits.Rules

	env, err := envList(req.Env)
	if err != nil {
		return nil, err
	}
	// Code sees every mounted skill, so each of their rules must allow
	// what it is given.
	if err := checkEnv(env, req.Env, pol); err != nil {
		return nil, err
	}
	argv := append(append([]string{}, interp.Argv...), cp.Program.Path())
	argv = append(argv, req.Args...)

	runID := newID("run_")
	jobID := runtime.IDPrefix + strings.TrimPrefix(runID, "run_")
	job := runtime.Job{Sandbox: runtime.SandboxSpec{ID: jobID, RootFS: "/", Limits: limits}, Invocation: runtime.Invocation{Args: argv, Env: env, Files: req.Files, Limits: limits}}
	cp.applyTo(&job)
	if err := runtime.ValidateJob(job); err != nil {
		return nil, errkind.Wrap(errkind.InvalidParams, err)
	}
	p := &Plan{
		runID:        runID,
		jobID:        jobID,
		request:      req,
		script:       cp.Program.Path(),
		scriptSHA256: cp.SHA256,
		interpreter:  interp,
		argv:         argv,
		env:          env,
		limits:       limits,
		limitRules:   rules,
		code:         cp,
		policy:       pol,
	}
	return p, nil
}

// codeDigest binds an approval to exactly one code run: the session, the
// skills it mounts and their versions, the language and code, and what it
// is given and runs under (as a script run's digest).
func codeDigest(p *Plan) string {
	c := p.code
	mounts := make([]string, len(c.Mounts))
	for i, m := range c.Mounts {
		mounts[i] = m.Skill.Name + "@" + m.Skill.Digest + "=" + m.Path
	}
	return store.RequestDigest(append([]string{
		"tool", api.MethodSkillsRunCode,
		"session", p.origin.SessionID,
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
	job.Sandbox.Skills = make([]runtime.SkillBind, len(c.Mounts))
	for i, m := range c.Mounts {
		job.Sandbox.Skills[i] = runtime.SkillBind{Source: m.Root, Target: m.Path}
	}
	job.Sandbox.Program = c.Program
	job.Invocation.ModuleEnv = c.ModuleEnv
}

// AuditSkills are the mounted skills as audit records name them.
func (c *CodePlan) AuditSkills() []audit.SkillRef {
	if c == nil {
		return nil
	}
	out := make([]audit.SkillRef, len(c.Mounts))
	for i, m := range c.Mounts {
		out[i] = audit.SkillRef{Name: m.Skill.Name, Digest: m.Skill.Digest, Location: m.Skill.Location, Path: m.Path}
	}
	return out
}

// AuditCode is the code as audit records keep it: with the text (capped at
// audit.MaxCodeText) or only its size and hash.
func (c *CodePlan) AuditCode(withText bool) *audit.CodeInfo {
	if c == nil {
		return nil
	}
	return audit.NewCodeInfo(c.Language, c.Code, withText, audit.MaxCodeText)
}

// MountedSkills are the mounts as the result names them.
func (c *CodePlan) MountedSkills() []api.MountedSkill {
	if c == nil {
		return nil
	}
	out := make([]api.MountedSkill, len(c.Mounts))
	for i, m := range c.Mounts {
		out[i] = api.MountedSkill{Name: m.Skill.Name, Path: m.Path, Digest: m.Skill.Digest}
	}
	return out
}

// AuditSkill is the one skill a script run's records name (nil for a code
// run, whose records list Skills).
func (p *Plan) AuditSkill() *audit.SkillRef {
	sk := p.request.Skill
	if sk == nil {
		return nil
	}
	return &audit.SkillRef{Name: sk.Name, Digest: sk.Digest, Location: sk.Location}
}

// SkillName names the run's skill(s) for logs and events.
func (p *Plan) SkillName() string {
	if p.code != nil {
		names := make([]string, len(p.code.Mounts))
		for i, m := range p.code.Mounts {
			names[i] = m.Skill.Name
		}
		return strings.Join(names, ",")
	}
	return p.request.Skill.Name
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

// CheckLanguage refuses a run_code language that has no image mapping
// (what the service checks before it asks policy).
func CheckLanguage(language string) error {
	_, err := codeProgramName(language)
	return err
}
