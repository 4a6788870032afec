package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/mcp"
)

// rawClient speaks newline-delimited JSON-RPC to a server on an IO
// transport, so a test can send what no SDK client would.
type rawClient struct {
	t     *testing.T
	w     io.Writer
	lines chan map[string]json.RawMessage
}

// connectRaw serves svc on an IO transport over pipes (as skillbox mcp
// serves stdio) and initializes the session.
func connectRaw(t *testing.T, svc api.Service, maxLine int) *rawClient {
	t.Helper()
	return connectRawWith(t, svc, mcp.Options{}, maxLine)
}

func connectRawWith(t *testing.T, svc api.Service, opts mcp.Options, maxLine int) *rawClient {
	t.Helper()
	opts.PollInterval = -1
	srv := mcp.New(svc, opts)
	sr, cw := io.Pipe() // client -> server
	cr, sw := io.Pipe() // server -> client
	conn, err := srv.Connect(context.Background(), &sdk.IOTransport{Reader: sr, Writer: sw, MaxLineLength: maxLine})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cw.Close(); conn.Close() })
	c := &rawClient{t: t, w: cw, lines: make(chan map[string]json.RawMessage, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(cr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("server wrote a line that is not a JSON object: %q", sc.Text())
				continue
			}
			c.lines <- m
		}
	}()
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if r := c.recv(`0`); r["error"] != nil {
		t.Fatalf("initialize: %s", r["error"])
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *rawClient) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.w, line+"\n"); err != nil {
		c.t.Fatalf("sending: %v", err)
	}
}

// recv returns the next response with the given id (raw JSON, "null"
// included), skipping the server's notifications and requests.
func (c *rawClient) recv(id string) map[string]json.RawMessage {
	c.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("the server hung up waiting for id %s", id)
			}
			if _, isRequest := m["method"]; isRequest {
				continue
			}
			if string(m["id"]) == id {
				return m
			}
			b, _ := json.Marshal(m)
			c.t.Fatalf("got a response for id %s, want id %s: %s", m["id"], id, b)
		case <-timeout:
			c.t.Fatalf("no response for id %s", id)
		}
	}
}

func rpcError(t *testing.T, r map[string]json.RawMessage) (int, string) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if r["error"] == nil || json.Unmarshal(r["error"], &e) != nil {
		b, _ := json.Marshal(r)
		t.Fatalf("want a JSON-RPC error, got %s", b)
	}
	return e.Code, e.Message
}

// TestDuplicateKeysRefused: a message holding one member name twice in an
// object, at any depth, is answered with a JSON-RPC error naming the key
// and where it is, and nothing of it runs (the SDK would run the
// last value); a line that is not JSON on its own, which the SDK would join
// with the next ones, and an over-long line are refused the same way, and
// the connection stays up for the next call.
func TestDuplicateKeysRefused(t *testing.T) {
	f := newFake(t)
	c := connectRaw(t, f, 4096)
	cases := []struct {
		name  string
		lines []string
		id    string // of each answer
		code  int
		wants []string
	}{
		{"arguments", []string{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/a.sh","path":"scripts/b.sh"}}}`},
			"1", -32602, []string{`"path" appears twice in params.arguments`, "send each key once"}},
		{"nested, case differs", []string{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/a.sh","env":{"MODE":"a","mode":"b"}}}}`},
			"2", -32602, []string{`"mode" appears twice in params.arguments.env`, "ignoring case"}},
		{"escaped", []string{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/a.sh","files":[{"name":"x","content":"","n\u0061me":"y"}]}}}`},
			"3", -32602, []string{`"name" appears twice in params.arguments.files[0]`}},
		{"tool name", []string{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"skills_list","arguments":{"path":"scripts/a.sh"},"name":"skills_run_script"}}`},
			"4", -32602, []string{`"name" appears twice in params`}},
		{"params twice", []string{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"skills_list"},"params":{"name":"skills_run_script","arguments":{"path":"scripts/a.sh"}}}`},
			"5", -32600, []string{`member "params" appears twice`}},
		{"method twice", []string{`{"jsonrpc":"2.0","id":6,"method":"tools/list","method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/a.sh"}}}`},
			"6", -32600, []string{`member "method" appears twice`}},
		{"id twice", []string{`{"jsonrpc":"2.0","id":7,"ID":8,"method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/a.sh"}}}`},
			"null", -32600, []string{`member "ID" appears twice`}},
		{"notification", []string{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestId":2}}`},
			"null", -32602, []string{`"requestId" appears twice in params`}},
		{"the client's response", []string{`{"jsonrpc":"2.0","id":77,"result":{"action":"accept","action":"decline"}}`},
			"null", -32600, []string{`"action" appears twice in result`}},
		{"one message over two lines", []string{`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"skills_run_script",`, `"arguments":{"path":"scripts/a.sh","path":"scripts/b.sh"}}}`},
			"null", -32700, []string{"not valid JSON", "one JSON-RPC message per line"}},
		{"over-long line", []string{`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/a.sh","stdin":"` + strings.Repeat("x", 5000) + `"}}}`},
			"null", -32600, []string{"longer than 4096 bytes"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			for _, line := range tc.lines {
				c.send(line)
				r := c.recv(tc.id)
				code, msg := rpcError(t, r)
				if code != tc.code {
					t.Errorf("code %d, want %d (%s)", code, tc.code, msg)
				}
				for _, w := range tc.wants {
					if !strings.Contains(msg, w) {
						t.Errorf("message %q does not say %q", msg, w)
					}
				}
			}
		})
	}
	c.t = t
	f.mu.Lock()
	calls := slices.Clone(f.calls)
	f.mu.Unlock()
	for _, call := range calls {
		if strings.HasPrefix(call, "run:") {
			t.Errorf("a refused message ran: %s", call)
		}
	}
	// The connection is still up, and a message without repeats runs.
	c.send(`{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/b.sh","env":{"MODE":"a"},"files":[{"name":"x","content":""}]}}}`)
	if r := c.recv(`20`); r["error"] != nil {
		t.Fatalf("a normal call failed: %s", r["error"])
	}
	if !f.called("run:scripts/b.sh:") {
		t.Errorf("the normal call did not run; calls %v", f.calls)
	}
}

// TestGuardedTransportSDKClient: the SDK's own client works through the
// checked IO transport (initialize, notifications, tool calls both ways).
func TestGuardedTransportSDKClient(t *testing.T) {
	f := newFake(t)
	srv := mcp.New(f, mcp.Options{PollInterval: -1})
	sr, cw := io.Pipe()
	cr, sw := io.Pipe()
	conn, err := srv.Connect(context.Background(), &sdk.IOTransport{Reader: sr, Writer: sw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &sdk.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	var list mcp.ListOutput
	structured(t, call(t, cs, mcp.ToolList, map[string]any{}), &list)
	if len(list.Skills) != 2 {
		t.Errorf("skills_list = %+v", list.Skills)
	}
	if res := call(t, cs, mcp.ToolRunScript, map[string]any{"path": "scripts/greet.sh"}); res.IsError {
		t.Errorf("skills_run_script: %s", text(res))
	}
	if !f.called("run:scripts/greet.sh:") {
		t.Errorf("the run did not reach the service; calls %v", f.calls)
	}
}

// TestDuplicateKeysInElicitationAnswer: the client's answer to an
// elicitation holding "action" twice ("accept" and "decline") is refused,
// the waiting tool call ends with an error giving the reason rather than
// hanging or going by either value, and nothing is approved.
func TestDuplicateKeysInElicitationAnswer(t *testing.T) {
	f := newFake(t)
	f.run = func(_ context.Context, p api.RunScriptParams) (*api.RunScriptResult, error) {
		if p.ConfirmationID != "c1" {
			return nil, &api.ConfirmationRequiredError{ID: "c1", Reason: "scripts need approval", Rule: "test.hcl:3", Digest: "sha256:abc"}
		}
		return &api.RunScriptResult{RunID: "r1", Path: p.Path, Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	srv := mcp.New(f, mcp.Options{PollInterval: -1, ElicitApprovals: true})
	sr, cw := io.Pipe()
	cr, sw := io.Pipe()
	conn, err := srv.Connect(context.Background(), &sdk.IOTransport{Reader: sr, Writer: sw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cw.Close(); conn.Close() })
	lines := bufio.NewScanner(cr)
	next := func() map[string]json.RawMessage {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the server hung up: %v", lines.Err())
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("not JSON: %q", lines.Text())
		}
		return m
	}
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(cw, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}`)
	next()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/greet.sh"}}}`)
	var result map[string]json.RawMessage
	for result == nil {
		m := next()
		switch {
		case string(m["method"]) == `"elicitation/create"`:
			send(`{"jsonrpc":"2.0","id":` + string(m["id"]) + `,"result":{"action":"decline","content":{"approve":true},"action":"accept"}}`)
		case m["method"] != nil:
		case string(m["id"]) == "null":
			if _, msg := rpcError(t, m); !strings.Contains(msg, `"action" appears twice in result`) {
				t.Errorf("the client was told %q", msg)
			}
		case string(m["id"]) == "1":
			result = m
		}
	}
	// The SDK fails the call that waited for the answer, with the reason.
	if _, msg := rpcError(t, result); !strings.Contains(msg, "the client's response was refused") || !strings.Contains(msg, `"action" appears twice`) {
		t.Errorf("tools/call failed with %q, want the refusal's reason", msg)
	}
	if f.called("approve:c1") || f.called("run:scripts/greet.sh:c1") {
		t.Errorf("the refused answer approved the run: %v", f.calls)
	}
}
