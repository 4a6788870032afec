package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skillbox/skillbox/images/deps"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/span"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner/layers"
	"github.com/skillbox/skillbox/sandbox/core/workspace"
)

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
	layer, warnings, err := e.runLayer(dctx, p, img, rootfs)
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
	job.Invocation.ModuleEnv = layers.ModuleEnv(job.Invocation.ModuleEnv, img.Name, layer)
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
	out.Hint = e.deps.ImportHint(res.ExitCode, res.Stderr, img.Name, p.SkillName())
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

// runLayer is the dependency layer p's run mounts, and the notes of what
// was left out of it.
func (e *Engine) runLayer(ctx context.Context, p *Plan, img runtime.ImageRef, rootfs string) (*deps.Layer, []string, error) {
	if p.code == nil {
		return e.deps.ForSkill(ctx, layers.Mount{Skill: p.request.Skill, Root: p.skillRoot}, img, rootfs, p.limits.Timeout)
	}
	mounts := make([]layers.Mount, len(p.code.Mounts))
	for i, m := range p.code.Mounts {
		mounts[i] = layers.Mount{Skill: m.Skill, Root: m.Root}
	}
	return e.deps.ForCode(ctx, mounts, img, rootfs, p.limits.Timeout)
}
