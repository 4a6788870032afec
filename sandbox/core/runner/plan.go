package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/skills"
)

// RunRequest is one script run as asked for by a host or a person.
type RunRequest struct {
	Skill *skills.Skill
	// Script is relative to the skill root: any file of the skill, unless
	// policy restricts the directories (script_dirs).
	Script string
	Args   []string
	Env    map[string]string
	Stdin  []byte
	Files  []runtime.InputFile
	// Workspace, when set, backs /work with a workspace (see
	// WorkspaceRequest).
	Workspace *WorkspaceRequest
	Limits    runtime.Limits // requested; may only lower the policy's limits
	Network   bool           // requested; needs a policy rule that allows it
	// Code makes it a skills.run_code run (Skill and Script stay empty).
	Code *CodeRequest

	// Optional live copies of the streams (the CLI's terminal).
	Stdout, Stderr runtime.StreamSink

	// Command, when set, runs this shell command in the shell image
	// instead of a script (a skill's !`command` or hook; see command.go).
	Command *CommandSpec

	// Background starts the run in its session's sandbox and returns at
	// once (isolation = "session" only); runs.* follow it.
	Background bool
}

// Origin is who asked for a run, as its audit records name them.
type Origin struct {
	Peer      *api.Peer
	SessionID string
	RequestID string
	Method    string // the JSON-RPC method, when the run came over the socket
}

// Plan is a validated request with everything resolved: what will run, where,
// under which limits, under which policy. Its Digest binds a confirmation to
// exactly this run. PrepareWith builds it once and nothing changes it after:
// it is read through its methods, so the plan an approver approved is the
// plan that runs (what a run gets as it starts is ExecOptions').
type Plan struct {
	runID        string
	jobID        string
	request      RunRequest
	origin       Origin
	script       string
	skillRoot    string
	scriptSHA256 string
	interpreter  policy.Interpreter
	argv         []string
	env          []string
	moduleEnv    []string
	// scriptDirsRule names the policy rule(s) that allowed the script's
	// directory, or policy.RuleScriptDirsDefault.
	scriptDirsRule string
	limits         runtime.Limits
	limitRules     []string
	network        bool
	networkRule    string
	egress         []egress.Rule
	egressRule     string
	egressSecrets  []*policy.Secret
	digest         string
	code           *CodePlan
	workspace      *WorkspacePlan
	policy         *policy.SkillPolicy
	isolation      policy.Isolation
	isolationRule  string
}

// RunID names the run.
func (p *Plan) RunID() string { return p.runID }

// JobID is the container id: runtime.IDPrefix + the run id's hex.
func (p *Plan) JobID() string { return p.jobID }

// Request is the run as asked for.
func (p *Plan) Request() RunRequest { return p.request }

// Origin is who asked (PrepareWith's).
func (p *Plan) Origin() Origin { return p.origin }

// Script is the cleaned path of the script relative to the skill root
// (a command's label; a code run's program in the sandbox).
func (p *Plan) Script() string { return p.script }

// SkillRoot is the pinned copy of the skill the run mounts.
func (p *Plan) SkillRoot() string { return p.skillRoot }

// ScriptSHA256 is the hash of what runs: the script, command or code.
func (p *Plan) ScriptSHA256() string { return p.scriptSHA256 }

// Interpreter is the image and program the script runs with.
func (p *Plan) Interpreter() policy.Interpreter { return p.interpreter }

// Argv is the run's command line in the sandbox.
func (p *Plan) Argv() []string { return p.argv }

// Env is the environment the caller gave, as KEY=VALUE in a stable order.
func (p *Plan) Env() []string { return p.env }

// ModuleEnv puts the skill root and the script's directory on the
// interpreter's module path (runtime.ModulePathEnv).
func (p *Plan) ModuleEnv() []string { return p.moduleEnv }

// ScriptDirsRule names the policy rule(s) that allowed the script's
// directory, or policy.RuleScriptDirsDefault.
func (p *Plan) ScriptDirsRule() string { return p.scriptDirsRule }

// Limits are the run's limits: the policy's, tightened by the request's.
func (p *Plan) Limits() runtime.Limits { return p.limits }

// LimitRules name the sources of the limits.
func (p *Plan) LimitRules() []string { return p.limitRules }

// Network says whether the run has full network access, and NetworkRule
// the rule that gave it.
func (p *Plan) Network() bool { return p.network }

// NetworkRule: see Network.
func (p *Plan) NetworkRule() string { return p.networkRule }

// Egress are the destinations the run may reach through the egress proxy
// (policy egress, when the run has no full network), and EgressRule the
// rules that list them.
func (p *Plan) Egress() []egress.Rule { return p.egress }

// EgressRule: see Egress.
func (p *Plan) EgressRule() string { return p.egressRule }

// EgressSecrets are the secrets the proxy adds for the run (policy secret
// blocks whose hosts the destinations reach).
func (p *Plan) EgressSecrets() []*policy.Secret { return p.egressSecrets }

// Digest binds a confirmation to exactly this run.
func (p *Plan) Digest() string { return p.digest }

// Code is what a skills.run_code run runs (nil for other runs).
func (p *Plan) Code() *CodePlan { return p.code }

// Workspace is the run's workspace (nil for a run without one).
func (p *Plan) Workspace() *WorkspacePlan { return p.workspace }

// Policy is the run's policy, resolved once (policy.Config.For, or
// ForSkills for a code run): the plan's facets are its.
func (p *Plan) Policy() *policy.SkillPolicy { return p.policy }

// Isolation is how the run is isolated (policy Isolation), and
// IsolationRule the rule that says so.
func (p *Plan) Isolation() policy.Isolation { return p.isolation }

// IsolationRule: see Isolation.
func (p *Plan) IsolationRule() string { return p.isolationRule }

// Prepare is PrepareWith for a run no one in particular asked for, under
// the policy of the skills req mounts.
func (e *Engine) Prepare(req RunRequest) (*Plan, error) {
	return e.PrepareWith(req, Origin{}, e.cfg.ForSkills(RunSkillNames(req)...))
}

// RunSkillNames are the names of the skills req mounts: its skill, or a
// code run's.
func RunSkillNames(req RunRequest) []string {
	if req.Code != nil {
		names := make([]string, 0, len(req.Code.Skills))
		for _, sk := range req.Code.Skills {
			if sk != nil {
				names = append(names, sk.Name)
			}
		}
		return names
	}
	if req.Skill == nil {
		return nil
	}
	return []string{req.Skill.Name}
}

// PrepareWith validates req, asked for by origin, against the skill and
// pol, the policy of the skills it mounts (policy.Config.ForSkills),
// without running anything; a
// run with a workspace reads the files it is given from it now, so that
// its digest (what an approval binds) covers them. Errors wrap
// errkind.InvalidParams, errkind.NotFound, errkind.Denied or
// errkind.LimitExceeded.
func (e *Engine) PrepareWith(req RunRequest, origin Origin, pol *policy.SkillPolicy) (*Plan, error) {
	if pol == nil || pol.Skill != strings.Join(RunSkillNames(req), ",") {
		return nil, errkind.Errorf(errkind.Internal, "the run's policy is not that of the skills it mounts")
	}
	p, err := e.prepare(req, pol)
	if err != nil {
		return nil, err
	}
	p.origin = origin
	if err := e.planIsolation(p); err != nil {
		return nil, err
	}
	if req.Workspace != nil {
		if req.Command != nil {
			return nil, errkind.Errorf(errkind.InvalidParams, "a command (a skill's !`command` or hook) runs without a workspace")
		}
		if err := e.planWorkspace(p); err != nil {
			return nil, err
		}
	}
	if p.code != nil {
		p.digest = codeDigest(p)
	} else {
		p.digest = planDigest(p)
	}
	return p, nil
}

func (e *Engine) prepare(req RunRequest, pol *policy.SkillPolicy) (*Plan, error) {
	if req.Code != nil {
		return e.prepareCode(req, pol)
	}
	if req.Skill == nil {
		return nil, errkind.Errorf(errkind.InvalidParams, "no skill given")
	}
	if req.Command != nil {
		return e.prepareCommand(req, pol)
	}
	rel, err := CleanScriptPath(req.Script)
	if err != nil {
		return nil, err
	}
	dirs, dirsRule := pol.ScriptDirs.Value, pol.ScriptDirs.Rule
	if !policy.ScriptInDirs(rel, dirs) {
		if len(dirs) == 0 {
			return nil, errkind.Errorf(errkind.Denied, "no script of skill %q may be run: the script_dirs of %s have no directory in common; ask an administrator to fix them", req.Skill.Name, dirsRule)
		}
		return nil, errkind.Errorf(errkind.Denied, "script %q of skill %q is outside the directories policy lets scripts run from (script_dirs %s, set by %s): run a script under one of them", rel, req.Skill.Name, strings.Join(dirs, ", "), dirsRule)
	}
	if e.pins == nil {
		return nil, errkind.Errorf(errkind.Unavailable, "the engine has no skill snapshot store")
	}
	// Everything below reads the pinned copy: the script hashed here is the
	// one the sandbox will see, whatever happens to the skill's directory.
	root, err := e.pins.Pin(req.Skill)
	if err != nil {
		return nil, err
	}
	f, err := skills.OpenInRoot(root, rel)
	if err != nil {
		if errors.Is(err, skills.ErrNotFound) {
			return nil, errkind.Errorf(errkind.NotFound, "script %q not found in skill %q: give a file of the skill relative to its root (SKILL.md names them; skillbox skills show lists them)", rel, req.Skill.Name)
		}
		return nil, errkind.Errorf(errkind.InvalidParams, "script %q: %w", rel, err)
	}
	script, err := io.ReadAll(io.LimitReader(f, maxScriptBytes+1))
	f.Close()
	if err != nil {
		return nil, errkind.Errorf(errkind.Internal, "reading script %q: %w", rel, err)
	}
	if len(script) > maxScriptBytes {
		return nil, errkind.Errorf(errkind.InvalidParams, "script %q is larger than %d bytes", rel, maxScriptBytes)
	}
	sum := sha256.Sum256(script)

	interp, err := e.interpreterFor(rel, script)
	if err != nil {
		return nil, errkind.Wrap(errkind.InvalidParams, err)
	}

	limits, rules := policy.Tighten(pol.Limits.Value, req.Limits), pol.Limits.Rules

	network := false
	netRule := ""
	if req.Network {
		ok, rule := pol.Network.Value, pol.Network.Rule
		if !ok && len(pol.Egress.Value) == 0 {
			return nil, errkind.Errorf(errkind.Denied, "network access for skill %q is not allowed by any policy rule; ask an administrator to list its destinations in egress = [...] (or set network = true) in a policy block for it", req.Skill.Name)
		}
		// Without full network, the skill's egress destinations are its
		// network (planEgress).
		network, netRule = ok, rule
		if !ok {
			netRule = ""
		}
	}

	env, err := envList(req.Env)
	if err != nil {
		return nil, err
	}
	if err := checkEnv(env, req.Env, pol); err != nil {
		return nil, err
	}

	argv := append([]string{}, interp.Argv...)
	argv = append(argv, path.Join(runtime.SkillMount, rel))
	argv = append(argv, req.Args...)
	moduleEnv := runtime.ModulePathEnv(interpreterFamily(interp), rel)

	runID := newID("run_")
	jobID := runtime.IDPrefix + strings.TrimPrefix(runID, "run_")
	// Check what the backend would refuse (env names, input files, argv
	// size) now, before a confirmation is asked for or a run is audited.
	if err := runtime.ValidateJob(runtime.Job{
		Sandbox:    runtime.SandboxSpec{ID: jobID, RootFS: "/", SkillDir: "/", Limits: limits},
		Invocation: runtime.Invocation{Args: argv, Env: env, ModuleEnv: moduleEnv, Files: req.Files, Limits: limits},
	}); err != nil {
		return nil, errkind.Wrap(errkind.InvalidParams, err)
	}

	p := &Plan{
		runID:          runID,
		jobID:          jobID,
		request:        req,
		script:         rel,
		skillRoot:      root,
		scriptSHA256:   hex.EncodeToString(sum[:]),
		interpreter:    interp,
		argv:           argv,
		env:            env,
		moduleEnv:      moduleEnv,
		scriptDirsRule: dirsRule,
		limits:         limits,
		limitRules:     rules,
		network:        network,
		networkRule:    netRule,
		policy:         pol,
	}
	if err := planEgress(p); err != nil {
		return nil, err
	}
	return p, nil
}

// CheckImage reports whether the image p runs in can be had now, without
// building or unpacking anything (see ImageChecker); an image source that
// cannot tell says yes, and Execute finds out.
func (e *Engine) CheckImage(p *Plan) error {
	if ic, ok := e.images.(ImageChecker); ok {
		return ic.Available(p.interpreter.Image)
	}
	return nil
}

// interpreterFamily is the family runtime.ModulePathEnv knows an
// interpreter by: from the program it runs (python3, node), else the
// image's name (python-slim counts as python).
func interpreterFamily(in policy.Interpreter) string {
	if len(in.Argv) > 0 {
		switch prog := path.Base(in.Argv[0]); {
		case strings.HasPrefix(prog, "python"):
			return "python"
		case prog == "node" || prog == "nodejs":
			return "node"
		}
	}
	return in.Image
}

// CleanScriptPath checks that p names a file inside the skill without any
// way out: relative, no "..", no NUL, not the skill root itself. It returns
// the cleaned path. Which directories may be run from is policy's
// (script_dirs, checked by Prepare).
func CleanScriptPath(p string) (string, error) {
	if p == "" {
		return "", errkind.Errorf(errkind.InvalidParams, "path is empty: give a script relative to the skill root, e.g. scripts/run.py")
	}
	if strings.ContainsRune(p, 0) {
		return "", errkind.Errorf(errkind.InvalidParams, "path contains a NUL byte")
	}
	if path.IsAbs(p) {
		return "", errkind.Errorf(errkind.InvalidParams, "path %q is absolute: give it relative to the skill root, e.g. scripts/run.py", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", errkind.Errorf(errkind.InvalidParams, "path %q contains \"..\": only files inside the skill can run", p)
		}
	}
	c := path.Clean(p)
	if c == "." {
		return "", errkind.Errorf(errkind.InvalidParams, "path %q is the skill root, not a script: give a file of the skill, e.g. scripts/run.py", p)
	}
	return c, nil
}

// envList turns the caller's env into KEY=VALUE pairs in a stable order. The
// runtime refuses dangerous names; here only the shape is checked.
func envList(env map[string]string) ([]string, error) {
	keys := make([]string, 0, len(env))
	for k := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, errkind.Errorf(errkind.InvalidParams, "environment name %q is malformed", k)
		}
		if strings.ContainsRune(env[k], 0) {
			return nil, errkind.Errorf(errkind.InvalidParams, "environment value of %q contains a NUL byte", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

// checkEnv applies the environment allowlist of pol to a run (for a run
// that mounts several skills, every one of them must allow each name):
// names no rule can allow are malformed requests, names no matching rule
// allows are denied.
func checkEnv(env []string, given map[string]string, pol *policy.SkillPolicy) error {
	if err := runtime.ValidateEnv(env); err != nil {
		return errkind.Wrap(errkind.InvalidParams, err)
	}
	names := make([]string, 0, len(given))
	for k := range given {
		names = append(names, k)
	}
	if err := pol.CheckEnv(names); err != nil {
		return errkind.Errorf(errkind.Denied, "%s", errkind.Detail(err, policy.ErrDenied))
	}
	return nil
}

// planDigest binds an approval to exactly one run: the skill version, the
// script bytes, what it is given, and the limits it runs under.
func planDigest(p *Plan) string {
	req := p.request
	return store.RequestDigest(append([]string{
		"skill", req.Skill.Name,
		"skill_digest", req.Skill.Digest,
		"script", p.script,
		"script_sha256", p.scriptSHA256,
	}, runDigestFields(p)...)...)
}

// runDigestFields are the digest fields of what any run is given and runs
// under, after the fields that say what runs.
func runDigestFields(p *Plan) []string {
	req := p.request
	in := p.inputFiles()
	files := make([]string, 0, len(in))
	for _, f := range in {
		// Kind, mode and link target are part of what was approved.
		files = append(files, fmt.Sprintf("%q:%s:%o:%q:%s", f.Name, f.Kind, f.Mode, f.Target, SHA256Hex(f.Data)))
	}
	fields := []string{
		"args", strings.Join(QuoteAll(req.Args), " "),
		"env", strings.Join(QuoteAll(p.env), " "),
		"stdin_sha256", SHA256Hex(req.Stdin),
		"files", strings.Join(files, " "),
		"limits", fmt.Sprintf("%+v", p.limits),
		"network", fmt.Sprint(p.network),
	}
	if w := p.workspace; w != nil {
		// Where the changes go back, and whether they do, is approved too.
		fields = append(fields, "workspace", fmt.Sprintf("%q:%s:%s:%v:%q", w.Dir, w.Request.Kind, w.Grant.Mode, w.Grant.Delete, w.Grant.Excludes))
	}
	if len(p.egress) > 0 {
		// The destinations an approval covers are part of what it binds.
		fields = append(fields, "egress", strings.Join(p.EgressNames(), " "), "egress_secrets", strings.Join(p.secretNames(), " "))
	}
	return fields
}
