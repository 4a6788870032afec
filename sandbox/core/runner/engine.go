// Package runner is skillbox's run engine: it turns a run request that the
// service has already authorized into one sandboxed run. It plans the run
// (script path, interpreter image, limits, network and egress, the digest an
// approval binds), supplies its image, dependency layer and pinned skill
// copy, takes a warm sandbox when the pool has one, writes the run's audit
// records and calls the runtime. It knows nothing of sessions, callers or
// confirmations: those are the service's, which sits above it.
//
// A run never builds: the dependency layer a run needs is found by its key,
// waited for while a build is in flight (within the run's own timeout), or
// refused as unavailable with the command that builds it (Deps). The warm
// pool is filled when a skill is loaded (WarmSkills) and drained when a
// skill's digest changes (DrainStale); a run whose sandbox-wide limits or
// network differ from the pool's goes cold, never into a looser sandbox.
//
// A skill whose policy says isolation = "session" runs in its session's own
// sandbox (SessionSandboxes), one per image and sandbox-wide limits, booted
// by the session's first such run and destroyed with it; background runs
// live in it until they exit, and pause.go pauses, resumes and forks it
// through runtime/checkpoint. Everything before the sandbox (policy,
// confirmation, audit start) and after it (audit end, write-back, result) is
// the same code as any run's.
package runner

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/span"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
	"github.com/skillbox/skillbox/skills"
)

// maxScriptBytes caps how much of a script is read on the host (to hash it
// and to sniff a shebang); a larger script is refused rather than half-hashed.
const maxScriptBytes = 4 << 20

// ImageSource yields a ready, unpacked rootfs for an image name, building the
// image first when allowed. It is an interface so a warm pool or a containerd
// snapshotter can supply rootfs differently later.
type ImageSource interface {
	Ensure(ctx context.Context, name string, progress io.Writer) (runtime.ImageRef, string, error)
}

// Options are what an Engine is made of; New copies them, and the caller
// owns the parts' lifetimes.
type Options struct {
	Config  *policy.Config
	Images  ImageSource
	Runtime runtime.Runtime
	// Pool, when set, keeps pre-booted sandboxes of loaded skills (see
	// warm.go); it is made over Runtime.
	Pool *runtime.Pool
	// Pins gives each run a copy of the skill version it was checked
	// against; required (a run never mounts the live skill directory).
	Pins SkillPinner
	// Audit is the audit log's one writer (see audit.Journal); nil: no audit.
	Audit  audit.Recorder
	Logger hclog.Logger
	// Progress receives image build progress (stderr for the CLI).
	Progress io.Writer
	// Egress configures runs that policy gives egress destinations.
	Egress EgressOptions
	// Deps gives runs their dependency layers; nil: skills' declared
	// dependencies are ignored.
	Deps *Deps
	// Sessions keeps the session sandboxes of isolation = "session" runs;
	// nil: such runs are refused, saying why.
	Sessions *SessionSandboxes
}

// Engine turns an authorized run request into one sandboxed run: it
// confines the script path, picks the interpreter image from the extension,
// applies the policy's limits and network rule, writes the audit
// start/end records, and calls the runtime. Every front end runs through
// it (behind the service's authorization), so all behave the same.
type Engine struct {
	cfg      *policy.Config
	images   ImageSource
	rt       runtime.Runtime
	pool     *runtime.Pool
	pins     SkillPinner
	journal  audit.Recorder
	log      hclog.Logger
	progress io.Writer
	egress   EgressOptions
	deps     *Deps
	sessions *SessionSandboxes

	caMu           sync.Mutex // guards egress.CA
	egressBudgets  uidBudgets // per-uid budgets of egress audit records
	verMu          sync.Mutex // runs call version concurrently
	runtimeVersion string
}

// New makes an Engine of o.
func New(o Options) *Engine {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	j := o.Audit
	if j == nil {
		j = audit.NewJournal(nil, nil)
	}
	return &Engine{cfg: o.Config, images: o.Images, rt: o.Runtime, pool: o.Pool, pins: o.Pins, journal: j,
		log: log, progress: o.Progress, egress: o.Egress, deps: o.Deps, sessions: o.Sessions}
}

// Config is the policy the engine plans runs with.
func (e *Engine) Config() *policy.Config { return e.cfg }

// Runtime is the backend runs go to.
func (e *Engine) Runtime() runtime.Runtime { return e.rt }

// Pool is the warm pool, or nil.
func (e *Engine) Pool() *runtime.Pool { return e.pool }

// Pins is the skill snapshot store runs mount their skills from.
func (e *Engine) Pins() SkillPinner { return e.pins }

// Deps is the dependency layers of runs, or nil.
func (e *Engine) Deps() *Deps { return e.deps }

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

// ExecOptions are what a run is given as it starts that its approval does
// not bind, so that the approved plan stays as it was approved.
type ExecOptions struct {
	// ConfirmationID is the approval the run used, if any (audit only; it
	// is not part of the digest the approval is bound to).
	ConfirmationID string
	// Stdout and Stderr take live copies of the streams, after the
	// request's own.
	Stdout, Stderr runtime.StreamSink
	// WorkspaceAccount is the session workspace's part of the daemon's
	// workspace budget (per uid and in total), which the write-back's
	// growth is taken from; nil: none (a host workspace: the user's own
	// disk).
	WorkspaceAccount *workspace.Account
}

// Launched is what any run that got a sandbox has: its plan, the image
// and dependency layer it runs with, and the approval it used.
type Launched struct {
	RunID string
	Plan  *Plan
	// ConfirmationID is ExecOptions'.
	ConfirmationID string
	Image          runtime.ImageRef
	// DepsLayer is the dependency layer digest the run mounted, if any.
	DepsLayer string
	// Warnings are what the run went without and why (declared packages
	// left out of its dependency layer).
	Warnings []string
	// SessionSandbox names the session sandbox the run went to, if it did.
	SessionSandbox string
}

// Finished is a run that ended (Execute): the sandbox's result
// (runtime.Result: exit, reason, streams, outputs), held by value because
// a finished run always has one, with what the engine adds to it. It is
// the last of the shapes a run takes (RunRequest, Plan, runtime.Job,
// Finished or Started); front ends encode it (api.RunScriptResult).
type Finished struct {
	Launched
	Result runtime.Result
	// Hint says how to fix a failure skillbox recognises (a missing module).
	Hint string
	// Workspace is what the run took from its workspace and what came
	// back (runs with a workspace).
	Workspace *api.WorkspaceReport
}

// Started is a background run that started in its session's sandbox
// (Start) and goes on; runs.* follow it.
type Started struct {
	Launched
	Run runtime.BackgroundRun
}

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

// launch is a run's sandbox set-up, once its run.start record is written:
// what Execute and Start share.
type launch struct {
	opts                   ExecOptions
	img                    runtime.ImageRef
	job                    runtime.Job
	start                  *audit.Record
	began                  time.Time
	rtVersion, layerDigest string
	warnings               []string
}

// Execute runs a prepared foreground plan to its end. The audit start
// record is written (and fsynced) before the sandbox starts and the end
// record before the result is returned; if either cannot be written the
// run is refused or its result withheld (fail closed).
func (e *Engine) Execute(ctx context.Context, p *Plan, o ExecOptions) (*Finished, error) {
	if p.request.Background {
		return nil, errkind.Errorf(errkind.Internal, "run %s is a background run: it is started (Start), not executed", p.runID)
	}
	l, err := e.launch(ctx, p, o)
	if err != nil {
		return nil, err
	}
	return e.finish(ctx, p, l)
}

// Start starts a prepared background plan in its session's sandbox and
// returns once it runs; its run.end is written when it ends.
func (e *Engine) Start(ctx context.Context, p *Plan, o ExecOptions) (*Started, error) {
	if !p.request.Background {
		return nil, errkind.Errorf(errkind.Internal, "run %s is a foreground run: it is executed (Execute), not started", p.runID)
	}
	l, err := e.launch(ctx, p, o)
	if err != nil {
		return nil, err
	}
	return e.executeBackground(ctx, p, l)
}

func (e *Engine) launch(ctx context.Context, p *Plan, o ExecOptions) (*launch, error) {
	log := e.log
	if err := e.journal.Check(); err != nil {
		return nil, err
	}
	ictx, sp := span.Start(ctx, "image.resolve", span.AttrImage.String(p.interpreter.Image))
	img, rootfs, err := e.images.Ensure(ictx, p.interpreter.Image, e.progress)
	if err != nil {
		err = errkind.Errorf(errkind.Unavailable, "image %q for %s: %w", p.interpreter.Image, p.script, err)
	}
	span.End(sp, err, api.KindOf(err))
	if err != nil {
		return nil, err
	}
	dctx, sp := span.Start(ctx, "deps.layer")
	layer, warnings, err := e.deps.ForRun(dctx, p, img, rootfs)
	span.End(sp, err, api.KindOf(err))
	if err != nil {
		return nil, err
	}
	var layerDir, layerDigest string
	if layer != nil {
		layerDir, layerDigest = layer.Dir, layer.Digest
	}
	rtVersion := e.version(ctx)
	egCfg, err := e.egressConfig(ctx, p)
	if err != nil {
		return nil, err
	}

	req, og := p.request, p.origin
	began := time.Now()
	start := &audit.Record{
		Event:     audit.EventRunStart,
		Peer:      og.Peer,
		SessionID: og.SessionID,
		RequestID: og.RequestID,
		Method:    og.Method,
		Skill:     p.AuditSkill(),
		Skills:    p.code.AuditSkills(),
		Run:       e.runInfo(p, o, img, rtVersion, ""),
		Detail:    planDetail(p),
	}
	start.Run.Started = began.UTC()
	start.Run.DepsLayer, start.Run.Warnings = layerDigest, warnings
	start.Run.Code = p.code.AuditCode(true)
	if w := p.workspace; w != nil {
		start.Run.Workspace, start.Run.WorkspaceFiles = w.report(), w.auditFiles()
	}
	if err := e.journal.Record(ctx, start); err != nil {
		return nil, err
	}

	job := runtime.Job{
		Sandbox: runtime.SandboxSpec{ID: p.jobID, RootFS: rootfs, Image: img, SkillDir: p.skillRoot, DepsDir: layerDir,
			Limits: p.limits, Network: p.network, Egress: egCfg},
		Invocation: runtime.Invocation{Args: p.argv, Env: p.env, ModuleEnv: p.moduleEnv, Stdin: req.Stdin, Files: p.inputFiles(),
			Limits: p.limits, Stdout: TeeSink(req.Stdout, o.Stdout), Stderr: TeeSink(req.Stderr, o.Stderr)},
	}
	p.code.applyTo(&job)
	job.Invocation.ModuleEnv = depsModuleEnv(job.Invocation.ModuleEnv, img.Name, layer)
	log.Debug("run starting", "run_id", p.runID, "skill", p.SkillName(), "script", p.script, "image", img.Digest, "deps_layer", layerDigest)
	return &launch{opts: o, img: img, job: job, start: start, began: began, rtVersion: rtVersion, layerDigest: layerDigest, warnings: warnings}, nil
}

// finish runs a launched foreground run and writes its run.end.
func (e *Engine) finish(ctx context.Context, p *Plan, l *launch) (*Finished, error) {
	log, og, start, img, layerDigest, warnings := e.log, p.origin, l.start, l.img, l.layerDigest, l.warnings
	res, box, runErr := e.tracedRunJob(ctx, p, img, l.job)
	if runErr == nil && res != nil && res.Reason == runtime.ReasonKilled && errors.Is(context.Cause(ctx), ErrRunCancelled) {
		res.Reason = runtime.ReasonCancelled // runs.cancel, not a caller that went away
	}

	end := &audit.Record{
		Event:     audit.EventRunEnd,
		Peer:      og.Peer,
		SessionID: og.SessionID,
		RequestID: og.RequestID,
		Method:    og.Method,
		Skill:     start.Skill,
		Skills:    start.Skills,
		Run:       e.runInfo(p, l.opts, img, l.rtVersion, box),
		Detail:    start.Detail,
	}
	end.Run.Started = l.began.UTC()
	end.Run.DepsLayer, end.Run.Warnings = layerDigest, warnings
	end.Run.Ended = time.Now().UTC()
	if runErr == nil && res == nil {
		runErr = fmt.Errorf("runtime %s returned no result", e.rt.Name())
	}
	var wsReport *api.WorkspaceReport
	if runErr != nil {
		end.Outcome = audit.OutcomeError
		end.Error = runErr.Error()
	} else {
		end.Outcome = string(res.Reason)
		fillRunResult(end.Run, res)
		if p.workspace != nil {
			wsReport = p.workspace.applyBack(res, l.opts.WorkspaceAccount)
			end.Run.Workspace = wsReport
		}
	}
	// Use a fresh context: a cancelled caller must not cost us the end record.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := e.journal.Record(actx, end); err != nil {
		return nil, err
	}
	if runErr != nil {
		log.Error("run failed", "run_id", p.runID, "error", runErr)
		// The run.end record holds the failure.
		return nil, api.MarkAudited(runFailure(runErr))
	}
	log.Info("run finished", "run_id", p.runID, "skill", p.SkillName(), "reason", res.Reason, "exit_code", res.ExitCode, "duration", res.Duration)
	out := &Finished{Launched: Launched{RunID: p.runID, Plan: p, ConfirmationID: l.opts.ConfirmationID, Image: img, DepsLayer: layerDigest, Warnings: warnings,
		SessionSandbox: box}, Result: *res, Workspace: wsReport}
	out.Hint = e.deps.importHint(out)
	return out, nil
}

// Run is Prepare then Execute, for callers with no confirmation step between.
func (e *Engine) Run(ctx context.Context, req RunRequest) (*Finished, error) {
	p, err := e.Prepare(req)
	if err != nil {
		return nil, err
	}
	return e.Execute(ctx, p, ExecOptions{})
}

// version caches the runtime's version; it is asked once per engine (until
// it answers).
func (e *Engine) version(ctx context.Context) string {
	e.verMu.Lock()
	defer e.verMu.Unlock()
	if e.runtimeVersion == "" {
		v, err := e.rt.Version(ctx)
		if err != nil {
			return "unknown"
		}
		e.runtimeVersion = v
	}
	return e.runtimeVersion
}

// AuditRun is the plan as the audit records it: what an approval binds
// (script and its hash, args, network, egress, digest, code). A
// confirmation request keeps the code's text for the approver (withCode);
// the run's own records keep its size and hash. The run.start and run.end
// records add what only the run knows (Engine.runInfo).
func (p *Plan) AuditRun(withCode bool) *audit.RunInfo {
	return &audit.RunInfo{
		Script: p.script, ScriptSHA256: p.scriptSHA256, Args: p.request.Args,
		Network: p.network, Egress: p.AuditEgress(), Digest: p.digest, Code: p.code.AuditCode(withCode),
	}
}

// runInfo is the run as its run.start and run.end records name it; box is
// the session sandbox it went to ("" before it has).
func (e *Engine) runInfo(p *Plan, o ExecOptions, img runtime.ImageRef, rtVersion, box string) *audit.RunInfo {
	req := p.request
	ri := p.AuditRun(false)
	ri.RunID, ri.Limits, ri.EgressSecrets, ri.ConfirmationID = p.runID, p.limits, p.secretNames(), o.ConfirmationID
	ri.EnvNames, ri.EnvHash = audit.EnvSummary(req.Env)
	ri.Runtime, ri.RuntimeVersion, ri.Image, ri.ImageDigest = e.rt.Name(), rtVersion, img.Name, img.Digest
	if p.isolation == policy.IsolationSession {
		ri.Isolation, ri.SessionSandbox, ri.Background = string(p.isolation), box, req.Background
	}
	if len(req.Stdin) > 0 {
		ri.StdinBytes, ri.StdinSHA256 = int64(len(req.Stdin)), SHA256Hex(req.Stdin)
	}
	ri.Inputs = InputRefs(req.Files)
	return ri
}

// InputRefs names a run's input files as the audit log and an approver see
// them: path, size and sha256 (a directory or link by its type and target).
func InputRefs(files []runtime.InputFile) []audit.FileRef {
	var refs []audit.FileRef
	for _, f := range files {
		ref := audit.FileRef{Path: f.Name, Size: int64(len(f.Data)), SHA256: SHA256Hex(f.Data)}
		switch f.Kind {
		case runtime.InputDir:
			ref = audit.FileRef{Path: f.Name, Type: string(f.Kind)}
		case runtime.InputSymlink:
			ref = audit.FileRef{Path: f.Name, Type: string(f.Kind), Target: f.Target}
		}
		refs = append(refs, ref)
	}
	return refs
}

// planDetail names the configuration that shaped a run: the image block
// that chose the interpreter, the sources of its limits and the network rule.
func planDetail(p *Plan) map[string]string {
	d := map[string]string{"interpreter": strings.Join(p.interpreter.Argv, " ")}
	if c := p.request.Command; c != nil {
		d["command"] = audit.ClipText(c.Command, 2048)
	}
	if p.interpreter.Rule != "" {
		d["interpreter_rule"] = p.interpreter.Rule
	}
	if len(p.limitRules) > 0 {
		d["limit_rules"] = strings.Join(p.limitRules, "; ")
	}
	if p.networkRule != "" {
		d["network_rule"] = p.networkRule
	}
	if p.egressRule != "" {
		d["egress_rule"] = p.egressRule
	}
	if p.scriptDirsRule != "" {
		d["script_dirs_rule"] = p.scriptDirsRule
	}
	if len(p.moduleEnv) > 0 {
		d["module_path"] = strings.Join(p.moduleEnv, " ")
	}
	return d
}

func fillRunResult(ri *audit.RunInfo, res *runtime.Result) {
	ri.ExitCode = &res.ExitCode
	ri.Signal = res.Signal
	ri.Reason = string(res.Reason)
	ri.Warm = res.Warm
	ri.EgressStats = res.Egress
	ri.LimitsEnforcedBy = res.LimitsEnforcedBy
	if res.RuntimeVersion != "" {
		ri.RuntimeVersion = res.RuntimeVersion
	}
	ri.DurationMS = res.Duration.Milliseconds()
	ri.StdoutBytes = int64(len(res.Stdout))
	ri.StderrBytes = int64(len(res.Stderr))
	ri.StdoutSHA256 = SHA256Hex(res.Stdout)
	ri.StderrSHA256 = SHA256Hex(res.Stderr)
	ri.StdoutTruncated = res.StdoutTruncated
	ri.StderrTruncated = res.StderrTruncated
	for _, o := range res.Outputs {
		ri.Outputs = append(ri.Outputs, audit.FileRef{Path: o.Path, Size: o.Size, SHA256: o.SHA256})
	}
	ri.OutputsSkipped = res.OutputsSkipped
	ri.OutputsTruncated, ri.OutputsTruncatedBy = res.OutputsTruncated, res.OutputsTruncatedBy
	ri.OutputsOmittedFiles, ri.OutputsOmittedBytes = res.OutputsOmittedFiles, res.OutputsOmittedBytes
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

// QuoteAll quotes each of ss as Go would (%q): how digests and approvers
// see argument lists.
func QuoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// SHA256Hex is the hex sha256 of b, as audit records and digests name
// contents.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// newID returns prefix + 128 random bits in hex.
func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}

// runFailure is a run's failure as the engine returns it: of the kind it
// has (a backend's sentinels carry theirs), or else the sandbox failing.
func runFailure(err error) error {
	if errkind.Of(err) == errkind.Internal {
		return errkind.Errorf(errkind.Internal, "sandbox failed: %w", err)
	}
	return err
}

// TeeSink writes to both sinks (either may be nil).
func TeeSink(a, b runtime.StreamSink) runtime.StreamSink {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return StreamFunc(func(p []byte) (int, error) {
		a.Write(p)
		return b.Write(p)
	})
}

// StreamFunc is a function as a runtime.StreamSink.
type StreamFunc func(p []byte) (int, error)

func (f StreamFunc) Write(p []byte) (int, error) { return f(p) }

// ErrRunCancelled is the cause of a run's ctx when runs.cancel stopped it.
var ErrRunCancelled = errors.New("run cancelled on request")
