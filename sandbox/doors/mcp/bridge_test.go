package mcp_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/doors/daemon"
	"github.com/skillbox/skillbox/sandbox/doors/mcp"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
)

// TestBridge serves MCP through the Go client to a daemon on a real Unix
// socket (fake runtime): the daemon sees this process's uid, streams a
// run's events on the run's own connection, and holds guarded runs for
// approval, which the MCP user gives by elicitation (this uid is an
// approver in the config).
func TestBridge(t *testing.T) {
	cfgText := strings.Replace(serviceConfig, `approvers = ["4242"]`, fmt.Sprintf(`approvers = ["%d"]`, os.Getuid()), 1)
	rs := newRealServiceWith(t, cfgText)
	rs.rt.RunFunc = func(_ context.Context, job runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{Stdout: []byte("ran\n"), Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit, Runtime: "fake"}}, nil
	}
	ctx := context.Background()
	bridge := serveBridge(t, rs)
	progress := make(chan string, 16)
	cs := connect(t, bridge, mcp.Options{ElicitApprovals: true}, &sdk.ClientOptions{
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			progress <- req.Params.Message
		},
	})

	call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"hello", "guarded-deploy"}})
	if res := call(t, cs, mcp.ToolRead, map[string]any{"skill": "hello", "path": "/etc/passwd"}); !res.IsError || !strings.HasPrefix(text(res), "invalid_params: ") {
		t.Errorf("read outside through the daemon: isError=%v %q", res.IsError, text(res))
	}
	params := &sdk.CallToolParams{Name: mcp.ToolRunScript, Arguments: map[string]any{"skill": "hello", "path": "scripts/run.sh"}}
	params.SetProgressToken(1)
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.IsError {
		t.Fatalf("run: %q", text(res))
	}
	// The first message is the run.started event, sent on the run's own
	// connection to the daemon.
	if msg := <-progress; !strings.Contains(msg, "started") {
		t.Errorf("first progress message through the daemon = %q", msg)
	}

	res = call(t, cs, mcp.ToolRunScript, map[string]any{"skill": "guarded-deploy", "path": "scripts/deploy.sh"})
	if res.IsError || len(rs.rt.Jobs()) != 2 {
		t.Errorf("guarded run approved by elicitation: isError=%v %q, %d jobs", res.IsError, text(res), len(rs.rt.Jobs()))
	}
}

// serveBridge serves rs's parts as a daemon on a Unix socket and returns
// a bridge to it.
func serveBridge(t *testing.T, rs *realService) *client.Client {
	t.Helper()
	o := rs.opts
	d := daemon.New(daemon.Options{Options: service.Options{
		Config: o.Config, Skills: o.Skills, Engine: o.Engine, Sessions: o.Sessions, Confirmations: o.Confirmations, Audit: o.Audit,
	}})
	sock := filepath.Join(t.TempDir(), "skillbox.sock")
	ln, err := sockfile.Listen(sock, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Server().Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-served })
	cl, err := client.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestBridgeHeldHooks: hooks the daemon holds for confirmation are asked
// about by elicitation through the bridge, all of them in one answer (the
// daemon's confirmation_ids survive the client), and each runs once.
func TestBridgeHeldHooks(t *testing.T) {
	rs := newHookService(t, "./scripts/check.sh", "./scripts/other.sh")
	// The daemon counts this uid as an approver.
	cfg := *rs.opts.Config
	cfg.Daemon.Approvers = []string{fmt.Sprint(os.Getuid())}
	rs.opts.Config = &cfg
	asked := 0
	cs := connect(t, serveBridge(t, rs), mcp.Options{ElicitApprovals: true}, &sdk.ClientOptions{
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked++
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		},
	})
	call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"guarded-hook"}})
	res := call(t, cs, mcp.ToolCheck, map[string]any{"tool": "Bash", "input": map[string]any{"command": "ls"}})
	if res.IsError || asked != 1 || len(rs.rt.Jobs()) != 2 {
		t.Errorf("held hooks through the daemon: isError=%v %q, asked %d times, %d runs; want asked once, 2 runs", res.IsError, text(res), asked, len(rs.rt.Jobs()))
	}
}
