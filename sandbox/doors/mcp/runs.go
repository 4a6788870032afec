package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
)

// Tools that follow background runs (background: true).
const (
	ToolRunsList   = "runs_list"
	ToolRunsLogs   = "runs_logs"
	ToolRunsWait   = "runs_wait"
	ToolRunsSignal = "runs_signal"
)

// RunsListOutput is runs_list's output.
type RunsListOutput struct {
	Runs []api.BackgroundRun `json:"runs" jsonschema:"this conversation's background runs, oldest first"`
}

// RunLogsInput is runs_logs's input.
type RunLogsInput struct {
	RunID  string `json:"run_id" jsonschema:"the background run"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to read from: the next_offset of the previous read, 0 at first"`
	Length int64  `json:"length,omitempty" jsonschema:"bytes to read (default and at most 1 MiB)"`
}

// RunWaitInput is runs_wait's input.
type RunWaitInput struct {
	RunID     string `json:"run_id" jsonschema:"the background run"`
	TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"how long to wait for it to end, in milliseconds (default 30000, at most 600000); it may still be running after"`
}

// RunSignalInput is runs_signal's input.
type RunSignalInput struct {
	RunID  string `json:"run_id" jsonschema:"the background run"`
	Signal string `json:"signal,omitempty" jsonschema:"TERM (default), INT, HUP, KILL, QUIT, USR1, USR2, STOP or CONT"`
}

func (c *Conn) addRunTools() {
	ro := &sdk.ToolAnnotations{ReadOnlyHint: true}
	sdk.AddTool(c.mcp, &sdk.Tool{Name: ToolRunsList, Title: "List background runs", Annotations: ro,
		Description: "List this conversation's background runs (started with background: true): state, exit code, log."}, c.runsList)
	sdk.AddTool(c.mcp, &sdk.Tool{Name: ToolRunsLogs, Title: "Read a background run's output", Annotations: ro,
		Description: "Read a background run's stdout and stderr from a byte offset; next_offset is where to continue, eof says it ended and all was read."}, c.runsLogs)
	sdk.AddTool(c.mcp, &sdk.Tool{Name: ToolRunsWait, Title: "Wait for a background run", Annotations: ro,
		Description: "Wait (at most timeout_ms) until a background run ends; returns its state and exit code."}, c.runsWait)
	sdk.AddTool(c.mcp, &sdk.Tool{Name: ToolRunsSignal, Title: "Signal a background run",
		Description: "Send a signal (TERM by default) to every process of a background run, e.g. to stop a server it started."}, c.runsSignal)
}

// runWorkspace is the workspace a run call names: a background run takes
// none (it has no end to write changes back at).
func (c *Conn) runWorkspace(ctx context.Context, req *sdk.CallToolRequest, background bool, inputs []string) api.WorkspaceParams {
	if background {
		return api.WorkspaceParams{}
	}
	return api.WorkspaceParams{Workspace: c.workspaceDir(ctx, req.Session), Inputs: inputs}
}

func (c *Conn) runsList(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, RunsListOutput, error) {
	res, err := c.s.svc.ListRuns(ctx, c.caller, api.RunsListParams{SessionID: c.session})
	if err != nil {
		return nil, RunsListOutput{}, toolError(err)
	}
	return nil, RunsListOutput{Runs: res.Runs}, nil
}

func (c *Conn) runsLogs(ctx context.Context, _ *sdk.CallToolRequest, in RunLogsInput) (*sdk.CallToolResult, *api.RunLogsResult, error) {
	res, err := c.s.svc.RunLogs(ctx, c.caller, api.RunLogsParams{SessionID: c.session, RunID: in.RunID, Offset: in.Offset, Length: in.Length})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, res, nil
}

func (c *Conn) runsWait(ctx context.Context, _ *sdk.CallToolRequest, in RunWaitInput) (*sdk.CallToolResult, *api.BackgroundRun, error) {
	res, err := c.s.svc.WaitRun(ctx, c.caller, api.RunWaitParams{SessionID: c.session, RunID: in.RunID, TimeoutMS: in.TimeoutMS})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, res, nil
}

func (c *Conn) runsSignal(ctx context.Context, _ *sdk.CallToolRequest, in RunSignalInput) (*sdk.CallToolResult, *api.BackgroundRun, error) {
	res, err := c.s.svc.SignalRun(ctx, c.caller, api.RunSignalParams{SessionID: c.session, RunID: in.RunID, Signal: in.Signal})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, res, nil
}
