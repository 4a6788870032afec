package mcp

import (
	"context"
	"errors"
	"slices"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
)

// Bridge is an api.Service that forwards every call to a running daemon
// through the Go client, so `skillbox mcp --socket PATH` serves the
// daemon's skills, policy, confirmations and audit trail. The daemon knows
// the caller from the socket's peer credentials (this process's uid), so
// the caller argument of each method is not sent.
type Bridge struct {
	// Client carries the calls; Socket is dialled anew for each streaming
	// run, so that a run's events (which the daemon sends on the
	// connection of the call) reach that call alone.
	Client *client.Client
	Socket string
}

var _ api.Service = (*Bridge)(nil)

// fromClient turns a client error into a service-shaped one: a
// confirmation request becomes *api.ConfirmationRequiredError, pending when
// it names a confirmation the call passed, with the confirmation_ids of held
// hooks kept in its data; any other daemon error is the wire error
// (*api.Error), which matches its kind's sentinel and carries its data; a
// lost connection is unavailable.
func fromClient(err error, passed ...string) error {
	var we *api.Error
	if !errors.As(err, &we) {
		if errors.Is(err, client.ErrConnectionLost) || errors.Is(err, client.ErrClosed) {
			return errors.Join(api.ErrUnavailable, err)
		}
		return err
	}
	if d, ok := we.ConfirmationRequired(); ok {
		cr := &api.ConfirmationRequiredError{
			ID: d.ConfirmationID, Reason: d.Reason, Rule: d.Rule, Digest: d.Digest,
			Pending: d.ConfirmationID != "" && slices.Contains(passed, d.ConfirmationID),
		}
		if ids, ok := we.Data["confirmation_ids"]; ok {
			return api.WithData(cr, map[string]any{"confirmation_ids": ids})
		}
		return cr
	}
	return err
}

func (b *Bridge) CreateSession(ctx context.Context, _ api.Peer, p api.CreateSessionParams) (*api.CreateSessionResult, error) {
	r, err := b.Client.CreateSessionWith(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) CloseSession(ctx context.Context, _ api.Peer, p api.SessionParams) (*api.CloseSessionResult, error) {
	if err := b.Client.CloseSession(ctx, p.SessionID); err != nil {
		return nil, fromClient(err, "")
	}
	return &api.CloseSessionResult{Closed: true}, nil
}

func (b *Bridge) Instructions(ctx context.Context, _ api.Peer, p api.SessionParams) (*api.InstructionsResult, error) {
	r, err := b.Client.Instructions(ctx, p.SessionID)
	return r, fromClient(err, "")
}

func (b *Bridge) ListSkills(ctx context.Context, _ api.Peer, p api.ListSkillsParams) ([]api.SkillInfo, error) {
	r, err := b.Client.ListSkills(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) LoadSkills(ctx context.Context, _ api.Peer, p api.LoadParams) (*api.LoadResult, error) {
	r, err := b.Client.Load(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) UnloadSkills(ctx context.Context, _ api.Peer, p api.UnloadParams) (*api.LoadResult, error) {
	r, err := b.Client.Unload(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) ReadSkillFile(ctx context.Context, _ api.Peer, p api.ReadParams) (*api.ReadResult, error) {
	r, err := b.Client.Read(ctx, p)
	return r, fromClient(err, "")
}

// streamingClient returns the client for a run: a connection of its own
// carrying the run's events to the call's sink, or the shared one.
func (b *Bridge) streamingClient(ctx context.Context, stream bool) (*client.Client, func(), error) {
	sink := api.EventSinkFrom(ctx)
	if !stream || sink == nil || b.Socket == "" {
		return b.Client, func() {}, nil
	}
	c, err := client.Dial(ctx, b.Socket)
	if err != nil {
		return nil, nil, fromClient(err, "")
	}
	c.OnNotification(func(n client.Notification) {
		if ev, err := n.Event(); err == nil {
			sink(derefEvent(ev))
		}
	})
	return c, func() { c.Close() }, nil
}

// derefEvent gives events the value types the service emits in process.
func derefEvent(ev api.Event) api.Event {
	switch e := ev.(type) {
	case *api.RunStartedEvent:
		return *e
	case *api.RunOutputEvent:
		return *e
	case *api.RunOutputDroppedEvent:
		return *e
	case *api.RunExitedEvent:
		return *e
	}
	return ev
}

func (b *Bridge) RunScript(ctx context.Context, _ api.Peer, p api.RunScriptParams) (*api.RunScriptResult, error) {
	return b.run(ctx, api.MethodSkillsRunScript, &p.Stream, p.ConfirmationID, &p)
}

func (b *Bridge) RunCode(ctx context.Context, _ api.Peer, p api.RunCodeParams) (*api.RunScriptResult, error) {
	return b.run(ctx, api.MethodSkillsRunCode, &p.Stream, p.ConfirmationID, &p)
}

// run makes a run call (params points at the request, stream at its Stream
// field): on a connection of its own when its events are wanted, else on
// the shared one without them.
func (b *Bridge) run(ctx context.Context, method string, stream *bool, confirmationID string, params any) (*api.RunScriptResult, error) {
	c, done, err := b.streamingClient(ctx, *stream)
	if err != nil {
		return nil, err
	}
	defer done()
	if c == b.Client {
		*stream = false
	}
	var r api.RunScriptResult
	if err := c.Call(ctx, method, params, &r); err != nil {
		return nil, fromClient(err, confirmationID)
	}
	return &r, nil
}

func (b *Bridge) CheckTool(ctx context.Context, _ api.Peer, p api.CheckToolParams) (*api.CheckToolResult, error) {
	r, err := b.Client.CheckTool(ctx, p)
	return r, fromClient(err, append([]string{p.ConfirmationID}, p.ConfirmationIDs...)...)
}

func (b *Bridge) CheckSkill(ctx context.Context, _ api.Peer, p api.CheckSkillParams) (*api.CheckSkillResult, error) {
	r, err := b.Client.CheckSkill(ctx, p)
	return r, fromClient(err, "")
}

func (b *Bridge) ListConfirmations(ctx context.Context, _ api.Peer, p api.ListConfirmationsParams) (*api.ListConfirmationsResult, error) {
	list, err := b.Client.ListConfirmations(ctx, p)
	if err != nil {
		return nil, fromClient(err, "")
	}
	out := &api.ListConfirmationsResult{Confirmations: make([]*api.Confirmation, len(list))}
	for i := range list {
		out.Confirmations[i] = &list[i]
	}
	return out, nil
}

func (b *Bridge) ApproveConfirmation(ctx context.Context, _ api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	r, err := b.Client.Approve(ctx, p.ID)
	return r, fromClient(err, "")
}

func (b *Bridge) DenyConfirmation(ctx context.Context, _ api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	r, err := b.Client.Deny(ctx, p.ID)
	return r, fromClient(err, "")
}

func (b *Bridge) CancelRun(ctx context.Context, _ api.Peer, p api.CancelRunParams) (*api.CancelRunResult, error) {
	r, err := b.Client.CancelRun(ctx, p.RunID)
	return r, fromClient(err, "")
}
