package service

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/span"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/skills"
)

// RunOptions say where a run comes from and how one that policy holds for
// confirmation gets it.
type RunOptions struct {
	// Method names the front end's call in audit records
	// ("skills.run_script", "skillbox run").
	Method    string
	SessionID string
	// ConfirmationID is an approval to use (the host repeats the call that
	// was held with it).
	ConfirmationID string
	// SelfApprove: a run that needs confirmation is confirmed by the caller
	// itself, who must be an approver (`skillbox run --yes`: the person at
	// the terminal), instead of a request waiting in the confirmation store.
	// The approval is audited like an approver's, bound to the run's digest.
	SelfApprove bool
	// SelfApproveHint ends the error of a run that needs confirmation when
	// there is no confirmation store and SelfApprove is off (e.g. "re-run
	// with --yes to confirm it yourself").
	SelfApproveHint string
	// Stream emits run.started, run.output and run.exited to the ctx's
	// event sink (api.WithEventSink).
	Stream bool
	// Authorized, when set, is told about the plan once the run is
	// authorized, just before it starts.
	Authorized func(*Plan)
	// Tool is the policy tool the run is decided as, with ToolInput as its
	// input; "" means skills.run_script with the script's path and args.
	Tool      string
	ToolInput []byte
	// AlsoTools are more tools the run is decided as, the strictest
	// decision winning: a hook that is arbitrary shell is both a run of
	// its skill's files and code (see hookTools).
	AlsoTools []PolicyTool
	// ConfirmationIDs are approvals to choose from when the run needs
	// one: the one bound to this run's digest is used. A call that runs
	// several hooks may need several approvals at once.
	ConfirmationIDs []string
	// Policy is the run's policy when the caller has resolved it already
	// (policy.Config.ForSkills of the skills it mounts), so that the rules
	// are matched once; nil: the run resolves it.
	Policy *policy.SkillPolicy
}

// PolicyTool is a tool and input policy decides a run as.
type PolicyTool struct {
	Tool  string
	Input []byte
}

// RunScript implements api.Service.
func (s *Service) RunScript(ctx context.Context, caller api.Peer, p api.RunScriptParams) (*api.RunScriptResult, error) {
	ses, err := s.session(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	sk, err := s.activeSkill(ses, p.Skill)
	if err != nil {
		return nil, err
	}
	req := RunRequest{Skill: sk, Script: p.Path, Network: p.Network}
	return s.runWire(ctx, caller, api.MethodSkillsRunScript, req, p.RunInputs)
}

// Run is the one path from a run request to a run, for every front end:
// policy for skills.run_script (and for network access), confirmation, a
// run slot, a healthy audit log, then the engine. Every decision is
// audited; refusals that were audited in detail are marked
// (api.MarkAudited).
func (s *Service) Run(ctx context.Context, caller api.Peer, req RunRequest, o RunOptions) (*Finished, error) {
	if req.Background {
		return nil, errkind.Errorf(errkind.Internal, "a background run is started (Service.Start), not run")
	}
	out, _, err := s.run(ctx, caller, req, o)
	return out, err
}

// Start is Run for a background run (req.Background): it returns once
// the run has started in its session's sandbox.
func (s *Service) Start(ctx context.Context, caller api.Peer, req RunRequest, o RunOptions) (*Started, error) {
	if !req.Background {
		return nil, errkind.Errorf(errkind.Internal, "a foreground run is run (Service.Run), not started")
	}
	_, out, err := s.run(ctx, caller, req, o)
	return out, err
}

// run authorizes and runs req: Finished for a foreground run, Started for
// a background one.
func (s *Service) run(ctx context.Context, caller api.Peer, req RunRequest, o RunOptions) (*Finished, *Started, error) {
	fail := func(err error) (*Finished, *Started, error) { return nil, nil, err }
	sk := req.Skill
	if sk == nil && req.Code == nil {
		return fail(errkind.Errorf(errkind.InvalidParams, "no skill given"))
	}
	// The run's policy, matched once: every decision below and the plan
	// are made against it.
	names := runner.RunSkillNames(req)
	pol := o.Policy
	if pol == nil {
		pol = s.cfg.ForSkills(names...)
	} else if pol.Skill != strings.Join(names, ",") {
		return fail(errkind.Errorf(errkind.Internal, "the policy given for the run is that of %q, not of the skills it mounts", pol.Skill))
	}
	// A lock pins versions: every skill the run mounts must be pinned.
	for i, lk := range runSkills(req) {
		if err := s.checkLock(ctx, caller, o.Method, o.SessionID, lk, pol.Parts()[i].Lock); err != nil {
			return fail(err)
		}
	}
	if sk != nil {
		span.Annotate(ctx, span.AttrSkill.String(sk.Name), span.AttrScript.String(req.Script))
	}
	pctx, sp := span.Start(ctx, "policy.decide")
	dec, err := s.decideRun(pctx, caller, o, req, pol)
	sp.SetAttributes(span.AttrEffect.String(string(dec.Effect)), span.AttrRule.String(dec.Rule))
	span.End(sp, err, api.KindOf(err))
	if err != nil {
		return fail(err)
	}
	p := caller
	origin := runner.Origin{Peer: &p, SessionID: o.SessionID, RequestID: AuditRequestID(api.RequestIDFrom(ctx)), Method: o.Method}
	plan, err := s.engine.PrepareWith(req, origin, pol)
	if err != nil {
		return fail(err)
	}
	// A missing image fails now, before an approver is asked or an
	// approval is used up, and without building it inside the call.
	if err := s.engine.CheckImage(plan); err != nil {
		return fail(err)
	}

	needConfirm := dec.Effect == policy.EffectConfirm
	what, reason, rule := planWhat(plan), dec.Reason, dec.Rule
	grantEgress := false // an approval of this run also covers its destinations
	if plan.Network() || len(plan.Egress()) > 0 {
		nd, err := s.decide(ctx, sk, pol, policy.NetworkTool, nil, *base(ctx, caller, o.Method, audit.EventDecision, o.SessionID))
		if err != nil {
			return fail(err)
		}
		switch {
		case nd.Effect == policy.EffectDeny:
			return fail(api.MarkAudited(errkind.Errorf(errkind.Denied, "network access for skill %q is denied by %s: %s", sk.Name, nd.Rule, nd.Why())))
		case nd.Effect == policy.EffectConfirm && len(plan.Egress()) > 0 && s.grants.covers(o.SessionID, sk.Name, plan.EgressNames()):
			// An approver approved these destinations for this skill
			// earlier in the session.
			s.log.Debug("egress destinations approved earlier in the session", "session", o.SessionID, "skill", sk.Name)
		case nd.Effect == policy.EffectConfirm:
			grantEgress = len(plan.Egress()) > 0
			if needConfirm {
				break
			}
			needConfirm, what, reason, rule = true, fmt.Sprintf("network access for skill %q", sk.Name), "network access: "+nd.Reason, nd.Rule
			if len(plan.Egress()) > 0 {
				what, reason = egressWhat(plan), "network access to "+strings.Join(plan.EgressNames(), ", ")+": "+nd.Reason
			}
		}
	}
	if w := plan.Workspace(); w != nil {
		wd, err := s.decideWorkspace(ctx, caller, o, req, pol, w)
		if err != nil {
			return fail(err)
		}
		if wd.Effect == policy.EffectConfirm && !needConfirm {
			needConfirm, what, reason, rule = true, fmt.Sprintf("a run in the workspace %s (%s)", w.Dir, w.Grant.Mode), wd.Reason, wd.Rule
		}
	}
	if needConfirm && o.ConfirmationID == "" && len(o.ConfirmationIDs) > 0 {
		o.ConfirmationID = s.confirmationFor(o.SessionID, plan.Digest(), o.ConfirmationIDs)
	}
	// approval is the confirmation the run uses, if any: it goes with
	// the run, and the plan stays as it was approved.
	approval := ""
	if needConfirm && o.ConfirmationID == "" {
		if o.SelfApprove {
			if approval, err = s.selfApprove(ctx, caller, o, plan, what, reason, rule); err != nil {
				return fail(err)
			}
		} else {
			return fail(s.requestConfirmation(ctx, caller, o, plan, what, reason, rule))
		}
	}

	// Take a run slot and make sure the run can be audited before an
	// approval is used up, so a busy or failing skillbox does not burn it.
	release, err := s.acquireRunSlot(ctx, caller)
	if err != nil {
		return fail(err)
	}
	defer release()
	if err := s.journal.Check(); err != nil {
		return fail(err)
	}
	if err := s.auditSpace(); err != nil {
		return fail(err)
	}
	if o.ConfirmationID != "" {
		if err := s.useConfirmation(ctx, caller, o, plan); err != nil {
			return fail(err)
		}
		approval = o.ConfirmationID
		if grantEgress {
			s.grants.grant(o.SessionID, sk.Name, plan.EgressNames())
		}
	}
	if o.Authorized != nil {
		o.Authorized(plan)
	}
	return s.execute(ctx, caller, o, plan, approval)
}

// auditSpace refuses a new run when the audit filesystem is below its
// watermark (audit min_free): the run's records would push it towards
// full, where every audited call fails.
func (s *Service) auditSpace() error {
	minFree := s.cfg.Audit.MinFree
	if minFree <= 0 {
		return nil
	}
	free, ok, err := s.journal.FreeBytes()
	if !ok {
		return nil
	}
	if err != nil {
		s.log.Warn("cannot read the audit filesystem's free space", "error", err)
		return nil
	}
	if free < minFree {
		s.log.Error("run refused: audit filesystem below its watermark", "free", free, "min_free", minFree)
		return errkind.Errorf(errkind.Unavailable, "the audit log's filesystem has %s free, below audit.min_free (%s): new runs are refused until space is freed (export and remove rotated audit files, or lower audit.min_free)", policy.FormatSize(free), policy.FormatSize(minFree))
	}
	return nil
}

// decideTool asks policy whether skill may use tool; the decision is
// audited. A deny is returned as an error.
func (s *Service) decideTool(ctx context.Context, caller api.Peer, method, sessionID string, sk *skills.Skill, pol *policy.SkillPolicy, tool string, input []byte) (policy.Decision, error) {
	dec, err := s.decide(ctx, sk, pol, tool, input, *base(ctx, caller, method, audit.EventDecision, sessionID))
	if err != nil {
		return dec, err
	}
	if dec.Effect == policy.EffectDeny {
		// The decision record just written says why.
		return dec, api.MarkAudited(errkind.Errorf(errkind.Denied, "%s for skill %q is denied by %s: %s", tool, sk.Name, dec.Rule, dec.Why()))
	}
	return dec, nil
}

// requestConfirmation records a pending confirmation for plan and returns
// the error that names it (or, without a store, says how to confirm).
func (s *Service) requestConfirmation(ctx context.Context, caller api.Peer, o RunOptions, plan *Plan, what, reason, rule string) error {
	if s.confirms == nil {
		hint := o.SelfApproveHint
		if hint == "" {
			hint = "ask an approver"
		}
		return errkind.Errorf(errkind.ConfirmationRequired, "%s needs confirmation (%s): %s", what, rule, hint)
	}
	details := confirmDetails(plan)
	s.lockDetails(details, plan)
	c, err := s.confirms.Request(o.SessionID, caller.UID, plan.Digest(), reason, rule, s.cfg.Daemon.ConfirmationTTL, store.WithDetails(details))
	if err != nil {
		return err
	}
	r := base(ctx, caller, o.Method, audit.EventConfirmRequest, o.SessionID)
	r.Skill, r.Skills = plan.AuditSkill(), plan.Code().AuditSkills()
	uid := caller.UID
	r.Confirmation = &audit.ConfirmationInfo{ID: c.ID, Digest: plan.Digest(), Rule: rule, Reason: reason, RequestedBy: &uid, Expires: c.Expires}
	r.Run = plan.AuditRun(true)
	r.Outcome = string(c.State)
	if err := s.record(ctx, r); err != nil {
		return err
	}
	return api.MarkAudited(&api.ConfirmationRequiredError{ID: c.ID, Reason: reason, Rule: rule, Digest: plan.Digest()})
}

// selfApprove confirms plan on behalf of caller, who must be an approver,
// and names the approval.
func (s *Service) selfApprove(ctx context.Context, caller api.Peer, o RunOptions, plan *Plan, what, reason, rule string) (string, error) {
	if !s.IsApprover(caller) {
		return "", errkind.Errorf(errkind.Denied, "%s needs confirmation (%s) and uid %d is not one of the approvers (daemon.approvers): ask an approver to run it", what, rule, caller.UID)
	}
	id := "cli_" + strings.TrimPrefix(plan.RunID(), "run_")
	uid := caller.UID
	r := base(ctx, caller, o.Method, audit.EventConfirmApprove, o.SessionID)
	r.Skill, r.Skills = plan.AuditSkill(), plan.Code().AuditSkills()
	r.Confirmation = &audit.ConfirmationInfo{ID: id, Digest: plan.Digest(), Rule: rule, Reason: reason, RequestedBy: &uid}
	r.Outcome = string(api.ConfirmationApproved)
	r.Detail = map[string]string{"via": "--yes"}
	if err := s.record(ctx, r); err != nil {
		return "", err
	}
	return id, nil
}

// confirmationFor picks, among ids, the approval of this session bound to
// digest: an approved one first, else a pending one (whose use then says it
// is still waiting). "" means none, and a new request is made.
func (s *Service) confirmationFor(sessionID, digest string, ids []string) string {
	if s.confirms == nil {
		return ""
	}
	found := ""
	for _, id := range ids {
		c, err := s.confirms.Get(id)
		if err != nil || c.SessionID != sessionID || c.Digest != digest {
			continue
		}
		switch c.State {
		case api.ConfirmationApproved:
			return id
		case api.ConfirmationPending:
			if found == "" {
				found = id
			}
		}
	}
	return found
}

// useConfirmation consumes the approval o names for plan (an id on a call
// that needs none is still checked: a host that sends one expects it to be
// honoured, not silently ignored).
func (s *Service) useConfirmation(ctx context.Context, caller api.Peer, o RunOptions, plan *Plan) error {
	cs, err := s.confirmStore()
	if err != nil {
		return err
	}
	r := base(ctx, caller, o.Method, audit.EventConfirmUse, o.SessionID)
	r.Skill, r.Skills = plan.AuditSkill(), plan.Code().AuditSkills()
	r.Confirmation = &audit.ConfirmationInfo{ID: o.ConfirmationID, Digest: plan.Digest()}
	if err := cs.Consume(o.ConfirmationID, o.SessionID, plan.Digest()); err != nil {
		r.Outcome, r.Error = audit.OutcomeRefused, err.Error()
		if aerr := s.record(ctx, r); aerr != nil {
			return aerr
		}
		return api.MarkAudited(err)
	}
	r.Outcome = string(api.ConfirmationUsed)
	return s.record(ctx, r)
}

// acquireRunSlot bounds concurrent runs, fairly per uid with a reserve for
// approvers (runSlots); a run waits briefly for a slot and then fails
// limit_exceeded so a host can back off.
func (s *Service) acquireRunSlot(ctx context.Context, caller api.Peer) (func(), error) {
	wait := s.queueWait
	if wait <= 0 {
		wait = 5 * time.Second
	}
	return s.runSlots.acquire(ctx, caller.UID, s.IsApprover(caller), wait)
}

// execute runs an authorized plan, with the approval it used: registered
// for runs.cancel, streaming its events when asked. A background plan is
// started.
func (s *Service) execute(ctx context.Context, caller api.Peer, o RunOptions, plan *Plan, approval string) (*Finished, *Started, error) {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	feed := s.runs.add(LiveRun{RunID: plan.RunID(), SessionID: o.SessionID, Skill: plan.SkillName(), Script: plan.Script(), UID: caller.UID, Started: time.Now().UTC()}, cancel)
	defer s.runs.remove(plan.RunID())
	xo := runner.ExecOptions{ConfirmationID: approval, Stdout: feed.sink(api.StreamStdout), Stderr: feed.sink(api.StreamStderr)}
	if id := s.sessionOfRun(o, plan); id != "" {
		// The run changes its session's workspace behind the files API's
		// open one: dropped, the next call walks the tree anew.
		s.wsOpen.drop(id)
		defer s.wsOpen.drop(id)
		// Its write-back grows the workspace: charged to the session's
		// owner (the caller, or, for a host workspace naming a session's
		// directory, whoever owns that session).
		owner := caller.UID
		if s.sessions != nil {
			if uid, ok := s.sessions.Owner(id); ok {
				owner = uid
			}
		}
		acct, err := s.workspaceAccount(id, owner)
		if err != nil {
			return nil, nil, err
		}
		xo.WorkspaceAccount = acct
	}

	sink := api.EventSinkFrom(ctx)
	if !o.Stream {
		sink = nil
	}
	if sink != nil {
		ev := &outputEvents{runID: plan.RunID(), sink: sink}
		xo.Stdout = runner.TeeSink(xo.Stdout, ev.stream(api.StreamStdout))
		xo.Stderr = runner.TeeSink(xo.Stderr, ev.stream(api.StreamStderr))
		sink(api.RunStartedEvent{RunID: plan.RunID(), SessionID: o.SessionID, Skill: plan.SkillName(), Path: plan.Script(),
			Image: plan.Interpreter().Image, Runtime: s.engine.Runtime().Name()})
	}
	failed := func(err error) (*Finished, *Started, error) {
		feed.finish(api.RunExitedEvent{RunID: plan.RunID(), ExitCode: -1, Reason: "error", Error: err.Error()})
		return nil, nil, err
	}
	if plan.Request().Background {
		st, err := s.engine.Start(runCtx, plan, xo)
		if err != nil {
			return failed(err)
		}
		// A background run started and goes on in its session's sandbox:
		// this call's feed ends here, and the run's output is the
		// session's (runs.output).
		feed.finish(api.RunExitedEvent{RunID: plan.RunID(), ExitCode: -1, Reason: backgroundReason,
			Error: "the run goes on in the background in its session's sandbox: read its output with runs.output"})
		return nil, st, nil
	}
	out, err := s.engine.Execute(runCtx, plan, xo)
	if err != nil {
		return failed(err)
	}
	r := out.Result
	exited := api.RunExitedEvent{RunID: plan.RunID(), ExitCode: r.ExitCode, Signal: r.Signal, Reason: string(r.Reason), DurationMS: r.Duration.Milliseconds()}
	feed.finish(exited)
	if sink != nil {
		sink(exited)
	}
	return out, nil, nil
}

// backgroundReason ends the live feed of a call that started a background
// run (the run itself goes on).
const backgroundReason = "background"

// CancelRun implements api.Service: it stops a run of the caller's uid.
// The run's own call returns its result with reason "cancelled".
func (s *Service) CancelRun(ctx context.Context, caller api.Peer, p api.CancelRunParams) (*api.CancelRunResult, error) {
	if p.RunID == "" {
		return nil, errkind.Errorf(errkind.InvalidParams, "run_id is required (run.started and the result name it)")
	}
	if !s.runs.cancel(p.RunID, caller.UID) {
		return nil, errkind.Errorf(errkind.NotFound, "run %q is not running: it has ended, or it is not yours", p.RunID)
	}
	s.log.Info("run cancelled", "run_id", p.RunID, "uid", caller.UID)
	return &api.CancelRunResult{RunID: p.RunID, Cancelled: true}, nil
}

// runRegistry knows the runs in progress, for runs.cancel and the
// console's list of live runs.
type runRegistry struct {
	mu   sync.Mutex
	runs map[string]*activeRun
}

type activeRun struct {
	LiveRun
	cancel context.CancelCauseFunc
	output *runFeed
}

// visibleTo says whether a caller sees the run (LiveRuns, FollowRun): an
// approver sees every run, anyone else its own.
func (a *activeRun) visibleTo(approver bool, uid uint32) bool {
	return approver || a.UID == uid
}

// add registers a run and returns the feed its output goes to.
func (r *runRegistry) add(run LiveRun, cancel context.CancelCauseFunc) *runFeed {
	a := &activeRun{LiveRun: run, cancel: cancel, output: newRunFeed(api.RunStartedEvent{RunID: run.RunID, SessionID: run.SessionID, Skill: run.Skill, Path: run.Script})}
	r.mu.Lock()
	r.runs[run.RunID] = a
	r.mu.Unlock()
	return a.output
}

// feed is the output of run id if the caller sees it, else nil.
func (r *runRegistry) feed(id string, approver bool, uid uint32) *runFeed {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.runs[id]
	if a == nil || !a.visibleTo(approver, uid) {
		return nil
	}
	return a.output
}

func (r *runRegistry) remove(id string) {
	r.mu.Lock()
	delete(r.runs, id)
	r.mu.Unlock()
}

// cancel stops run id if owner owns it; another uid's run is "not there".
func (r *runRegistry) cancel(id string, owner uint32) bool {
	r.mu.Lock()
	a := r.runs[id]
	r.mu.Unlock()
	if a == nil || a.UID != owner {
		return false
	}
	a.cancel(runner.ErrRunCancelled)
	return true
}

// list is the runs in progress, oldest first: every run when all, else
// those of uid.
func (r *runRegistry) list(all bool, uid uint32) []LiveRun {
	r.mu.Lock()
	out := []LiveRun{}
	for _, a := range r.runs {
		if a.visibleTo(all, uid) {
			out = append(out, a.LiveRun)
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.Before(out[j].Started)
		}
		return out[i].RunID < out[j].RunID
	})
	return out
}

// LiveRun is a run in progress in this daemon (skills.run_script or
// run_code over any front end), as the console lists it.
type LiveRun struct {
	RunID     string    `json:"run_id"`
	SessionID string    `json:"session_id,omitempty"`
	Skill     string    `json:"skill,omitempty"`
	Script    string    `json:"script,omitempty"`
	UID       uint32    `json:"uid"`
	Started   time.Time `json:"started"`
}

// LiveRunsResult is the console's list of live runs; OwnOnly says the
// caller is not an approver and sees its own runs only.
type LiveRunsResult struct {
	Runs    []LiveRun `json:"runs"`
	OwnOnly bool      `json:"own_only"`
}

// LiveRuns lists the runs in progress in this daemon: an approver's every
// run, anyone else's own. Background runs of session sandboxes are
// ListRuns'.
func (s *Service) LiveRuns(_ context.Context, caller api.Peer) (*LiveRunsResult, error) {
	approver := s.IsApprover(caller)
	return &LiveRunsResult{Runs: s.runs.list(approver, caller.UID), OwnOnly: !approver}, nil
}

// outputEvents turns a run's live output into run.output events, numbered
// across both streams.
type outputEvents struct {
	runID string
	sink  api.EventSink
	mu    sync.Mutex
	seq   uint64
}

func (e *outputEvents) stream(name string) runtime.StreamSink {
	return runner.StreamFunc(func(p []byte) (int, error) {
		if len(p) == 0 {
			return 0, nil
		}
		e.mu.Lock()
		e.seq++
		ev := api.RunOutputEvent{RunID: e.runID, Stream: name, Seq: e.seq, Data: string(p)}
		e.sink(ev)
		e.mu.Unlock()
		return len(p), nil
	})
}

// decideWorkspace decides the workspace pseudo-tool for every skill the
// run mounts, each decision audited: any deny refuses the run, any
// confirm holds it for an approver.
func (s *Service) decideWorkspace(ctx context.Context, caller api.Peer, o RunOptions, req RunRequest, pol *policy.SkillPolicy, w *runner.WorkspacePlan) (policy.Decision, error) {
	input, err := json.Marshal(policy.WorkspaceRequest{Dir: w.Dir, Kind: w.Request.Kind})
	if err != nil {
		return policy.Decision{}, errkind.Wrap(errkind.Internal, err)
	}
	var ds []policy.Decision
	for i, sk := range runSkills(req) {
		d, err := s.decide(ctx, sk, pol.Parts()[i], policy.WorkspaceTool, input, *base(ctx, caller, o.Method, audit.EventDecision, o.SessionID))
		if err != nil {
			return d, err
		}
		if d.Effect == policy.EffectDeny {
			return d, api.MarkAudited(errkind.Errorf(errkind.Denied, "the workspace %s is denied for skill %q by %s: %s", w.Dir, sk.Name, d.Rule, d.Reason))
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		// Code without skills: the grant Prepare found (a mode of none
		// refused it there) is the decision, recorded in run.start.
		return policy.Decision{Effect: policy.EffectAllow, Rule: w.Grant.Rule}, nil
	}
	return policy.Strictest(ds...), nil
}
