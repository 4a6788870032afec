package service

import (
	"context"
	"encoding/base64"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner/sessionbox"
)

// Background runs (background: true) live in their session's sandbox;
// runs.list, runs.logs, runs.wait and runs.signal follow them, for the
// session's owner only (a session is its owner's: s.session checks the
// caller's uid).

// backgroundResult is the wire result of a run started in the background.
func backgroundResult(o *Started) api.RunScriptResult {
	res := api.RunScriptResult{RunID: o.RunID, Path: o.Plan.Script(), Image: o.Image.Name, ImageDigest: o.Image.Digest,
		Skills: o.Plan.Code().MountedSkills(), DepsLayer: o.DepsLayer, Warnings: o.Warnings,
		Isolation: string(policy.IsolationSession), SessionSandbox: o.SessionSandbox,
		Outputs: []api.Output{}, Summary: wireSummary(outcome.Summary{})}
	if sk := o.Plan.Request().Skill; sk != nil {
		res.Skill, res.SkillDigest = sk.Name, sk.Digest
	}
	res.Network, res.ConfirmationID = o.Plan.Network(), o.ConfirmationID
	res.Limits = o.Plan.Limits().Map()
	bg := backgroundView(sessionbox.BackgroundRun{BackgroundRun: o.Run, SessionID: o.Plan.Origin().SessionID,
		Sandbox: o.SessionSandbox, Skill: o.Plan.SkillName(), Script: o.Plan.Script()})
	res.Background = &bg
	return res
}

func backgroundView(r sessionbox.BackgroundRun) api.BackgroundRun {
	out := api.BackgroundRun{RunID: r.ID, SessionID: r.SessionID, Skill: r.Skill, Path: r.Script, State: api.RunRunning,
		PID: r.PID, Started: r.Started, SessionSandbox: r.Sandbox, Log: r.Log, Paused: r.Paused}
	if !r.Running {
		code := r.ExitCode
		out.State, out.ExitCode, out.Signal = api.RunExited, &code, r.Signal
	}
	return out
}

// backgroundSessions checks the caller's session and returns the keeper
// of background runs.
func (s *Service) backgroundSessions(caller api.Peer, sessionID string) (*sessionbox.Sandboxes, error) {
	if _, err := s.session(caller, sessionID); err != nil {
		return nil, err
	}
	m := s.engine.Sessions()
	if m == nil {
		return nil, errkind.Errorf(errkind.NotFound, "this daemon has no session sandboxes, so no background runs")
	}
	return m, nil
}

// ListRuns implements api.Service.
func (s *Service) ListRuns(ctx context.Context, caller api.Peer, p api.RunsListParams) (*api.RunsListResult, error) {
	m, err := s.backgroundSessions(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	out := &api.RunsListResult{Runs: []api.BackgroundRun{}}
	for _, r := range m.Background(p.SessionID) {
		out.Runs = append(out.Runs, backgroundView(r))
	}
	return out, nil
}

// RunLogs implements api.Service.
func (s *Service) RunLogs(ctx context.Context, caller api.Peer, p api.RunLogsParams) (*api.RunLogsResult, error) {
	m, err := s.backgroundSessions(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	run, err := m.BackgroundRunOf(p.SessionID, p.RunID)
	if err != nil {
		return nil, err
	}
	data, size, err := m.Logs(p.SessionID, p.RunID, p.Offset, p.Length)
	if err != nil {
		return nil, err
	}
	res := &api.RunLogsResult{RunID: p.RunID, Offset: p.Offset, NextOffset: p.Offset + int64(len(data)), Size: size,
		Encoding: "utf-8", Data: string(data), State: api.RunRunning}
	if p.Offset > size {
		res.NextOffset = size
	}
	if !utf8.Valid(data) {
		res.Encoding, res.Data = "base64", base64.StdEncoding.EncodeToString(data)
	}
	if !run.Running {
		res.State = api.RunExited
		res.EOF = res.NextOffset >= size
	}
	return res, nil
}

// maxRunWait bounds one runs.wait call.
const (
	defaultRunWait = 30 * time.Second
	maxRunWait     = 10 * time.Minute
)

// WaitRun implements api.Service.
func (s *Service) WaitRun(ctx context.Context, caller api.Peer, p api.RunWaitParams) (*api.BackgroundRun, error) {
	m, err := s.backgroundSessions(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	if p.TimeoutMS < 0 {
		return nil, errkind.Errorf(errkind.InvalidParams, "timeout_ms must not be negative")
	}
	wait := defaultRunWait
	if p.TimeoutMS > 0 {
		wait = min(time.Duration(p.TimeoutMS)*time.Millisecond, maxRunWait)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	r, err := m.Wait(wctx, p.SessionID, p.RunID)
	if err != nil {
		return nil, err
	}
	out := backgroundView(r)
	return &out, nil
}

// signalNames are the signals runs.signal sends.
var signalNames = map[string]syscall.Signal{
	"TERM": unix.SIGTERM, "INT": unix.SIGINT, "HUP": unix.SIGHUP, "KILL": unix.SIGKILL, "QUIT": unix.SIGQUIT,
	"USR1": unix.SIGUSR1, "USR2": unix.SIGUSR2, "STOP": unix.SIGSTOP, "CONT": unix.SIGCONT,
}

// SignalRun implements api.Service; the signal is audited.
func (s *Service) SignalRun(ctx context.Context, caller api.Peer, p api.RunSignalParams) (*api.BackgroundRun, error) {
	m, err := s.backgroundSessions(caller, p.SessionID)
	if err != nil {
		return nil, err
	}
	name := strings.TrimPrefix(strings.ToUpper(p.Signal), "SIG")
	if p.Signal == "" {
		name = "TERM"
	}
	sig, ok := signalNames[name]
	if !ok {
		return nil, errkind.Errorf(errkind.InvalidParams, "signal %q is not one runs.signal sends: use TERM, INT, HUP, KILL, QUIT, USR1, USR2, STOP or CONT", p.Signal)
	}
	rec := base(ctx, caller, api.MethodRunsSignal, audit.EventRunSignal, p.SessionID)
	rec.Run = &audit.RunInfo{RunID: p.RunID, Signal: "SIG" + name}
	rec.Outcome = audit.OutcomeOK
	r, err := m.Signal(ctx, p.SessionID, p.RunID, sig)
	if err != nil {
		rec.Outcome, rec.Error = audit.OutcomeError, err.Error()
		if api.KindOf(err) == api.KindNotFound {
			rec.Outcome = audit.OutcomeRefused
		}
	}
	if rerr := s.record(ctx, rec); rerr != nil && err == nil {
		return nil, rerr
	}
	if err != nil {
		return nil, err
	}
	out := backgroundView(r)
	return &out, nil
}
