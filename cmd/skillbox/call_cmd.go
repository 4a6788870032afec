package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/skillbox/skillbox/sandbox/client"
)

// maxCallInput bounds JSON read from stdin; the daemon's own line limit is
// lower, this only keeps a mistaken `< /dev/zero` from eating memory.
const maxCallInput = 64 << 20

// callCommand sends one raw JSON-RPC call: the tool for scripts, debugging,
// and approvers (`skillbox call confirmations.approve '{"id":"cnf_…"}'`).
func callCommand() *cli.Command {
	return &cli.Command{
		Name:      "call",
		Usage:     "send one call to the daemon and print its result as JSON",
		ArgsUsage: "METHOD [JSON|-]",
		Description: "JSON is the call's params (an object); '-' reads it from stdin; none sends no params.\n" +
			"The result is printed as indented JSON. An error prints one line, `error (KIND): MESSAGE`\n" +
			"followed by its data as JSON, on stderr, and exits 1. Notifications the daemon sends\n" +
			"meanwhile (a run called with \"stream\": true: run.started, run.output, run.exited) are\n" +
			"printed live on stderr, one line each: METHOD PARAMS.\n\n" +
			"Examples:\n" +
			"   skillbox call sessions.create\n" +
			"   skillbox call skills.load '{\"session_id\":\"ses_…\",\"names\":[\"pdf\"]}'\n" +
			"   skillbox call confirmations.list '{\"state\":\"pending\"}'\n" +
			"   skillbox call skills.run_script '{\"session_id\":\"ses_…\",\"path\":\"scripts/x.sh\",\"stream\":true}'\n" +
			"   skillbox call runs.cancel '{\"run_id\":\"run_…\"}'\n" +
			"   echo '{\"id\":\"cnf_…\"}' | skillbox call confirmations.approve -",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Usage: "daemon socket `PATH`", Value: client.DefaultSocket, EnvVars: []string{client.EnvSocket}},
			&cli.DurationFlag{Name: "timeout", Usage: "give up (and cancel the call) after `D`; 0 waits (Ctrl-C cancels)"},
		},
		Action: callAction,
	}
}

func callAction(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) < 1 || len(args) > 2 {
		return exitCode(2, "usage: skillbox call [--socket PATH] [--timeout D] METHOD [JSON|-] (e.g. skillbox call sessions.create)")
	}
	method := args[0]
	var params json.RawMessage
	if len(args) == 2 {
		raw := []byte(args[1])
		if args[1] == "-" {
			var err error
			raw, err = io.ReadAll(io.LimitReader(c.App.Reader, maxCallInput))
			if err != nil {
				return exitCode(1, "reading params from stdin: %v", err)
			}
		}
		raw = bytes.TrimSpace(raw)
		if !json.Valid(raw) {
			return exitCode(2, "params are not valid JSON: %s (quote them for the shell, e.g. '{\"session_id\":\"ses_…\"}')", jsonProblem(raw))
		}
		if len(raw) == 0 || (raw[0] != '{' && raw[0] != '[') {
			return exitCode(2, "params must be a JSON object, e.g. '{\"session_id\":\"ses_…\"}'")
		}
		params = raw
	}

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if d := c.Duration("timeout"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}

	socket := c.String("socket")
	cl, err := client.Dial(ctx, socket)
	if err != nil {
		return exitCode(1, "%v", err)
	}
	defer cl.Close()

	// Notifications (the events of a run called with "stream": true) are
	// printed live on stderr, one line each, before the result.
	errOut := c.App.ErrWriter
	cl.OnNotification(func(n client.Notification) {
		fmt.Fprintf(errOut, "%s %s\n", n.Method, bytes.TrimSpace(n.Params))
	})

	var p any
	if params != nil {
		p = params
	}
	var result json.RawMessage
	err = cl.Call(ctx, method, p, &result)
	var rpcErr *client.Error
	switch {
	case errors.As(err, &rpcErr):
		line := fmt.Sprintf("error (%s): %s", orUnknown(rpcErr.Kind), rpcErr.Message)
		if len(rpcErr.Data) > 0 {
			if b, merr := json.Marshal(rpcErr.Data); merr == nil {
				line += " " + string(b)
			}
		}
		fmt.Fprintln(c.App.ErrWriter, line)
		return exitCode(1, "")
	case errors.Is(err, context.DeadlineExceeded):
		return exitCode(1, "no answer from skillbox within %s; the call was cancelled (raise --timeout)", c.Duration("timeout"))
	case errors.Is(err, context.Canceled):
		return exitCode(1, "interrupted; the call was cancelled")
	case err != nil:
		return exitCode(1, "%s on %s: %v", method, socket, err)
	}

	var out bytes.Buffer
	if err := json.Indent(&out, result, "", "  "); err != nil {
		out.Reset()
		out.Write(result)
	}
	out.WriteByte('\n')
	_, err = c.App.Writer.Write(out.Bytes())
	return err
}

func orUnknown(kind string) string {
	if kind == "" {
		return "unknown"
	}
	return kind
}

// jsonProblem describes why raw is not valid JSON.
func jsonProblem(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err.Error()
	}
	return "empty input"
}
