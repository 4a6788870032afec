package runner

import (
	"context"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// planIsolation sets how p's run is isolated: a session sandbox when every
// skill it mounts has isolation = "session" and it belongs to a session;
// a fresh sandbox otherwise. A background run needs a session sandbox,
// and is refused with the reason when it cannot have one.
func (e *Engine) planIsolation(p *Plan) error {
	req := p.request
	p.isolation, p.isolationRule = policy.IsolationRun, policy.RuleIsolationDefault
	if req.Command == nil && (p.code != nil || req.Skill != nil) {
		p.isolation, p.isolationRule = p.policy.Isolation.Value, p.policy.Isolation.Rule
	}
	if p.isolation == policy.IsolationSession && p.origin.SessionID == "" {
		// A run outside any session (skillbox run) has nothing to keep
		// a sandbox for.
		p.isolation, p.isolationRule = policy.IsolationRun, "a run outside a session gets a fresh sandbox"
	}
	if !req.Background {
		return nil
	}
	if req.Command != nil {
		return errkind.Errorf(errkind.InvalidParams, "a skill's command or hook cannot run in the background")
	}
	if p.origin.SessionID == "" {
		return errkind.Errorf(errkind.InvalidParams, "background runs live in a session's sandbox: create a session (sessions.create) and run in it")
	}
	if p.isolation != policy.IsolationSession {
		return errkind.Errorf(errkind.Denied, "background: true needs isolation = \"session\" for skill %q, and %s: ask an administrator to set isolation = \"session\" in a policy rule for it, or run without background", p.SkillName(), p.isolationRule)
	}
	if p.workspace != nil || req.Workspace != nil {
		return errkind.Errorf(errkind.InvalidParams, "a background run cannot write back to a workspace (it has no end to apply changes at): pass files, or run in the foreground")
	}
	return e.sessions.available()
}

// executeBackground starts a background run after its run.start record
// (start) is written; its run.end is written when it ends (or when its
// session closes). A run that could not start gets its run.end now.
func (e *Engine) executeBackground(ctx context.Context, p *Plan, l *launch) (*Started, error) {
	start := l.start
	run, box, err := e.sessions.startBackground(ctx, p, l.job, start)
	if err != nil {
		end := *start
		ri := *start.Run
		end.Run, end.Event, end.Outcome, end.Error = &ri, audit.EventRunEnd, audit.OutcomeError, err.Error()
		ri.Ended = time.Now().UTC()
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := e.journal.Record(actx, &end); rerr != nil {
			return nil, rerr
		}
		return nil, api.MarkAudited(runFailure(err))
	}
	start.Run.SessionSandbox = box
	e.log.Info("background run started", "run_id", p.runID, "skill", p.SkillName(), "sandbox", box, "pid", run.PID)
	return &Started{Launched: Launched{RunID: p.runID, Plan: p, ConfirmationID: l.opts.ConfirmationID, Image: l.img, DepsLayer: l.layerDigest, Warnings: l.warnings,
		SessionSandbox: box}, Run: run}, nil
}

// Sessions is the engine's keeper of session sandboxes (nil: none).
func (e *Engine) Sessions() *SessionSandboxes {
	if e == nil {
		return nil
	}
	return e.sessions
}
