package jsonrpc

import (
	"context"
	"sync"

	"github.com/skillbox/skillbox/sandbox/api"
)

// RegisterService serves every tool call of svc on s: each handler decodes
// the params strictly (Call.Bind), calls the service with the connection's
// kernel-reported peer and the request id in ctx, and returns the result
// for the server to encode. Runs that ask for stream: true get their events
// as notifications (see streamEvents).
func RegisterService(s *Server, svc api.Service) {
	s.Handle(api.MethodSessionsCreate, bind(svc.CreateSession))
	s.Handle(api.MethodSessionsClose, bind(svc.CloseSession))
	s.Handle(api.MethodSessionsInstructions, bind(svc.Instructions))
	s.Handle(api.MethodSkillsList, bind(svc.ListSkills))
	s.Handle(api.MethodSkillsLoad, bind(svc.LoadSkills))
	s.Handle(api.MethodSkillsUnload, bind(svc.UnloadSkills))
	s.Handle(api.MethodSkillsRead, bind(svc.ReadSkillFile))
	s.Handle(api.MethodSkillsRunScript, streamed(svc.RunScript))
	s.Handle(api.MethodSkillsRunCode, streamed(svc.RunCode))
	s.Handle(api.MethodToolsCheck, bind(svc.CheckTool))
	s.Handle(api.MethodSkillsCheck, bind(svc.CheckSkill))
	s.Handle(api.MethodConfirmationsList, bind(svc.ListConfirmations))
	s.Handle(api.MethodConfirmationsApprove, bind(svc.ApproveConfirmation))
	s.Handle(api.MethodConfirmationsDeny, bind(svc.DenyConfirmation))
	s.Handle(api.MethodRunsCancel, bind(svc.CancelRun))
	s.Handle(api.MethodRunsList, bind(svc.ListRuns))
	s.Handle(api.MethodRunsLogs, bind(svc.RunLogs))
	s.Handle(api.MethodRunsWait, bind(svc.WaitRun))
	s.Handle(api.MethodRunsSignal, bind(svc.SignalRun))
	s.Handle(api.MethodSessionsPause, bind(svc.PauseSession))
	s.Handle(api.MethodSessionsResume, bind(svc.ResumeSession))
	s.Handle(api.MethodSessionsFork, bind(svc.ForkSession))
	s.Handle(api.MethodSkillsActivate, bind(svc.ActivateSkill))
	s.Handle(api.MethodToolsReport, bind(svc.ReportTool))
	s.Handle(api.MethodSkillsPropose, bind(svc.ProposeChange))
	s.Handle(api.MethodProposalsList, bind(svc.ListProposals))
	s.Handle(api.MethodProposalsShow, bind(svc.ShowProposal))
	s.Handle(api.MethodProposalsApprove, bind(svc.ApproveProposal))
	s.Handle(api.MethodProposalsReject, bind(svc.RejectProposal))
	s.Handle(api.MethodSkillsLock, bind(svc.LockSkills))
	s.Handle(api.MethodWorkspaceList, bind(svc.ListWorkspace))
	s.Handle(api.MethodWorkspaceStat, bind(svc.StatWorkspace))
	s.Handle(api.MethodWorkspaceRead, bind(svc.ReadWorkspace))
	s.Handle(api.MethodWorkspaceWrite, bind(svc.WriteWorkspace))
	s.Handle(api.MethodWorkspaceDelete, bind(svc.DeleteWorkspace))
}

// serviceCtx is the ctx a service method gets: the request id for audit.
func serviceCtx(ctx context.Context, c *Call) context.Context {
	return api.WithRequestID(ctx, string(c.ID))
}

// bind adapts a service method taking params P to a Handler.
func bind[P, R any](f func(context.Context, api.Peer, P) (R, error)) Handler {
	return func(ctx context.Context, c *Call) (any, error) {
		var p P
		if err := c.Bind(&p); err != nil {
			return nil, err
		}
		return f(serviceCtx(ctx, c), c.Peer, p)
	}
}

// streamed is bind for the run calls: the call's events go to its client
// as notifications.
func streamed[P, R any](f func(context.Context, api.Peer, P) (R, error)) Handler {
	return func(ctx context.Context, c *Call) (any, error) {
		var p P
		if err := c.Bind(&p); err != nil {
			return nil, err
		}
		ev := &streamEvents{ctx: ctx, call: c}
		res, err := f(api.WithEventSink(serviceCtx(ctx, c), ev.emit), c.Peer, p)
		ev.flush()
		return res, err
	}
}

// streamEvents sends a call's events as notifications. run.started and
// run.exited wait for room in the connection's queue (they are few, and a
// client needs the run id to cancel); run.output is dropped when the queue
// is full, counted per run, and the count is sent as a run.output_dropped
// notification as soon as there is room again, at the latest before the
// call's response. The run never waits for the client, and the result
// still carries the whole (capped) output.
type streamEvents struct {
	ctx  context.Context
	call *Call

	mu      sync.Mutex
	dropped map[string]*api.RunOutputDroppedEvent
	order   []string
}

func (s *streamEvents) emit(e api.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, isOutput := e.(api.RunOutputEvent)
	if !isOutput {
		s.flushLocked(true)
		s.call.Notify(s.ctx, e.EventMethod(), e)
		return
	}
	if s.flushLocked(false) && s.call.TryNotify(e.EventMethod(), e) {
		return
	}
	if s.dropped == nil {
		s.dropped = map[string]*api.RunOutputDroppedEvent{}
	}
	d := s.dropped[out.RunID]
	if d == nil {
		d = &api.RunOutputDroppedEvent{RunID: out.RunID}
		s.dropped[out.RunID] = d
		s.order = append(s.order, out.RunID)
	}
	d.Events++
	d.Bytes += int64(len(out.Data))
}

// flush sends what is still owed (before the response).
func (s *streamEvents) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked(true)
}

// flushLocked sends the pending drop markers, waiting for room when wait is
// set; it reports whether none is left.
func (s *streamEvents) flushLocked(wait bool) bool {
	for len(s.order) > 0 {
		d := s.dropped[s.order[0]]
		if wait {
			if s.call.Notify(s.ctx, api.EventRunOutputDropped, d) != nil {
				return false
			}
		} else if !s.call.TryNotify(api.EventRunOutputDropped, d) {
			return false
		}
		delete(s.dropped, s.order[0])
		s.order = s.order[1:]
	}
	return true
}
