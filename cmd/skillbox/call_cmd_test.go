package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/jsonrpc"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
)

func callServer(t *testing.T) string {
	t.Helper()
	s := jsonrpc.NewServer(jsonrpc.ServerOptions{})
	s.Handle("echo", func(ctx context.Context, c *jsonrpc.Call) (any, error) { return c.Params, nil })
	s.Handle("sessions.create", func(ctx context.Context, c *jsonrpc.Call) (any, error) {
		return map[string]string{"session_id": "ses_1"}, nil
	})
	s.Handle("skills.run_script", func(ctx context.Context, c *jsonrpc.Call) (any, error) {
		return nil, &api.ConfirmationRequiredError{ID: "cnf_1", Reason: "network", Rule: "f.hcl:2", Digest: "sha256:d"}
	})
	s.Handle("block", func(ctx context.Context, c *jsonrpc.Call) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := sockfile.Listen(path, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(context.Background(), ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return path
}

func runCall(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter, app.Reader = &out, &errOut, strings.NewReader(stdin)
	err := app.Run(append([]string{"skillbox", "call"}, args...))
	var ee *exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.code
		if ee.msg != "" {
			fmt.Fprintln(&errOut, "skillbox: "+ee.msg)
		}
	default:
		code = 1
		fmt.Fprintln(&errOut, "skillbox: "+err.Error())
	}
	return out.String(), errOut.String(), code
}

func TestCallCommand(t *testing.T) {
	sock := callServer(t)

	out, errOut, code := runCall(t, "", "--socket", sock, "echo", `{"a":[1,2]}`)
	if code != 0 || out != "{\n  \"a\": [\n    1,\n    2\n  ]\n}\n" {
		t.Fatalf("echo: code %d out %q err %q", code, out, errOut)
	}
	out, _, code = runCall(t, "", "--socket", sock, "sessions.create")
	if code != 0 || !strings.Contains(out, `"session_id": "ses_1"`) {
		t.Fatalf("no params: %d %q", code, out)
	}
	out, _, code = runCall(t, ` {"from":"stdin"} `, "--socket", sock, "echo", "-")
	if code != 0 || !strings.Contains(out, `"from": "stdin"`) {
		t.Fatalf("stdin: %d %q", code, out)
	}
	t.Setenv("SKILLBOX_SOCKET", sock)
	if _, _, code := runCall(t, "", "echo", "{}"); code != 0 {
		t.Fatalf("SKILLBOX_SOCKET not used: %d", code)
	}

	// An RPC error: one line with kind, message and data; exit 1.
	out, errOut, code = runCall(t, "", "skills.run_script", `{"session_id":"ses_1","path":"scripts/a.py"}`)
	if code != 1 || out != "" {
		t.Fatalf("rpc error: code %d out %q", code, out)
	}
	if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "error (confirmation_required): ") ||
		!strings.Contains(errOut, `"confirmation_id":"cnf_1"`) {
		t.Fatalf("rpc error line %q", errOut)
	}
	_, errOut, code = runCall(t, "", "skills.lod")
	if code != 1 || !strings.HasPrefix(errOut, "error (not_found): unknown method") {
		t.Fatalf("unknown method: %d %q", code, errOut)
	}

	// Usage errors exit 2.
	if _, errOut, code := runCall(t, "", "echo", `{"a":`); code != 2 || !strings.Contains(errOut, "not valid JSON") {
		t.Fatalf("bad JSON: %d %q", code, errOut)
	}
	if _, _, code := runCall(t, "", "echo", `"str"`); code != 2 {
		t.Fatalf("non-object params: %d", code)
	}
	if _, _, code := runCall(t, ""); code != 2 {
		t.Fatalf("no method: %d", code)
	}

	// Timeouts and a missing daemon exit 1 with a hint.
	_, errOut, code = runCall(t, "", "--timeout", "100ms", "block", "{}")
	if code != 1 || !strings.Contains(errOut, "--timeout") {
		t.Fatalf("timeout: %d %q", code, errOut)
	}
	_, errOut, code = runCall(t, "", "--socket", filepath.Join(t.TempDir(), "none.sock"), "echo")
	if code != 1 || !strings.Contains(errOut, "skillbox serve") {
		t.Fatalf("no daemon: %d %q", code, errOut)
	}
}
