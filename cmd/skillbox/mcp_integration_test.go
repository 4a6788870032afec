//go:build integration

package main

// End-to-end test of `skillbox mcp`: the official MCP TypeScript SDK client
// (installed from npm by hack/mcp-client-deps.sh, pinned by the lock in
// testdata/mcpclient) spawns the real binary self-contained and drives it
// over stdio, with real gVisor sandboxes. Run with
//
//	go test -tags integration ./cmd/skillbox/ -run TestMCP -v
//
// SKILLBOX_MCP_CLIENT_DIR names the client's install directory (default:
// the hack script's cache).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// mcpClientResult is what testdata/mcpclient/client.mjs prints.
type mcpClientResult struct {
	Capabilities map[string]json.RawMessage `json:"capabilities"`
	Instructions string                     `json:"instructions"`
	Results      []struct {
		Op       string                    `json:"op"`
		Name     string                    `json:"name"`
		Result   json.RawMessage           `json:"result"`
		Error    *struct{ Message string } `json:"error"`
		Progress []struct {
			Message string `json:"message"`
		} `json:"progress"`
	} `json:"results"`
	Elicitations []struct {
		Message string `json:"message"`
	} `json:"elicitations"`
}

// toolResult is a tools/call result as the client returns it.
type toolResult struct {
	IsError           bool `json:"isError"`
	StructuredContent struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		Content  string `json:"content"`
		Runtime  string `json:"runtime"`
	} `json:"structuredContent"`
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
}

func (r toolResult) text() string {
	var parts []string
	for _, c := range r.Content {
		parts = append(parts, c.Text)
	}
	return strings.Join(parts, "\n")
}

// mcpClientDir installs the TypeScript SDK client (idempotent) and returns
// its directory.
func mcpClientDir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		runtimetest.SkipUnlessRequired(t, "node is not installed: the end-to-end MCP test drives skillbox with the official TypeScript SDK; install Node.js 20+ and npm (Debian: apt-get install nodejs npm)")
	}
	cmd := exec.Command(filepath.Join(itRepo, "hack", "mcp-client-deps.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/mcp-client-deps.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(rel, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// mcpFixture is a skill root, a config and an audit dir for `skillbox mcp`.
type mcpFixture struct{ root, cfgPath, auditDir string }

func newMCPFixture(t *testing.T) mcpFixture {
	t.Helper()
	base := t.TempDir()
	// A current runsc keeps its empty network namespace mounted in its
	// state dir; unmounted before the temporary dir goes.
	t.Cleanup(func() { unmountNullNetns(filepath.Join(base, "runsc")) })
	f := mcpFixture{root: filepath.Join(base, "skills"), cfgPath: filepath.Join(base, "skillbox.hcl"), auditDir: filepath.Join(base, "audit")}
	writeFiles(t, f.root, map[string]string{
		"hello/SKILL.md": "---\nname: hello\ndescription: Greets people and shows the kernel it runs on.\n---\n" +
			"Greet $0. The request was: $ARGUMENTS\n",
		"hello/references/guide.md":   "Be polite.\n",
		"hello/scripts/kernel.sh":     "#!/bin/sh\nuname -a\ncat /proc/version\ndmesg 2>&1 | head -5\n",
		"hello/scripts/fail.sh":       "#!/bin/sh\necho 'no such customer' >&2\nexit 7\n",
		"guarded-hello/SKILL.md":      "---\nname: guarded-hello\ndescription: Needs approval to run.\n---\nRun scripts/ok.sh.\n",
		"guarded-hello/scripts/ok.sh": "#!/bin/sh\necho approved run\n",
	})
	cfg := `
daemon {
  audit_dir = "` + f.auditDir + `"
  approvers = ["root"]
}
images { dir = "` + itImages + `" }
runtime "runsc" { state_dir = "` + filepath.Join(base, "runsc") + `" }
` + itPolicy
	if err := os.WriteFile(f.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// trail is everything in the audit dir.
func (f mcpFixture) trail() string {
	var trail strings.Builder
	filepath.Walk(f.auditDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			trail.Write(b)
		}
		return nil
	})
	return trail.String()
}

// TestMCPGoClient drives the real binary over stdio with the official Go
// SDK's client (no Node.js needed): tools, a run in gVisor, a failing
// script as a tool error, a confined read, the audit trail.
func TestMCPGoClient(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "shell")
	f := newMCPFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.Command(itBin, "mcp", "--root", f.root, "--config", f.cfgPath)
	cmd.Env = append(os.Environ(), "SKILLBOX_IMAGES="+itImages)
	client := sdk.NewClient(&sdk.Implementation{Name: "skillbox-go-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to skillbox mcp: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "skills_run_script") || !slices.Contains(names, "skills_load") {
		t.Fatalf("tools = %v", names)
	}
	callTool := func(name string, args map[string]any) (*sdk.CallToolResult, string) {
		t.Helper()
		return mcpCallTool(t, ctx, cs, name, args)
	}
	if res, text := callTool("skills_load", map[string]any{"names": []string{"hello"}}); res.IsError {
		t.Fatalf("load: %s", text)
	}
	res, text := callTool("skills_run_script", map[string]any{"path": "scripts/kernel.sh"})
	sc, _ := json.Marshal(res.StructuredContent)
	var run struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	json.Unmarshal(sc, &run)
	if res.IsError || run.ExitCode != 0 || !strings.Contains(run.Stdout, "gVisor") {
		t.Errorf("kernel.sh should run in gVisor: %s %s", text, sc)
	}
	if res, text := callTool("skills_run_script", map[string]any{"path": "scripts/fail.sh"}); !res.IsError || !strings.Contains(text, "exited with code 7") {
		t.Errorf("a failing script is a tool error with its exit code: %s", text)
	}
	if res, text := callTool("skills_read", map[string]any{"path": "../guarded-hello/SKILL.md"}); !res.IsError || !strings.Contains(text, "invalid_params") {
		t.Errorf("a path outside the skill is refused: %s", text)
	}
	cs.Close()
	for _, want := range []string{"scripts/kernel.sh", "scripts/fail.sh", "../guarded-hello/SKILL.md"} {
		if !strings.Contains(f.trail(), want) {
			t.Errorf("audit trail in %s does not mention %s", f.auditDir, want)
		}
	}
}

// mcpCallTool calls a tool and returns its result with its text content
// joined.
func mcpCallTool(t *testing.T, ctx context.Context, cs *sdk.ClientSession, name string, args map[string]any) (*sdk.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return res, strings.Join(text, "\n")
}

func TestMCPEndToEnd(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "shell")
	clientDir := mcpClientDir(t)
	f := newMCPFixture(t)
	root, cfgPath, auditDir := f.root, f.cfgPath, f.auditDir

	plan, _ := json.Marshal(map[string]any{
		"elicit": "accept",
		"steps": []map[string]any{
			{"op": "listTools"},
			{"op": "callTool", "name": "skills_load", "arguments": map[string]any{"names": []string{"hello"}}},
			{"op": "callTool", "name": "skills_read", "arguments": map[string]any{"path": "references/guide.md"}},
			{"op": "callTool", "name": "skills_run_script", "arguments": map[string]any{"path": "scripts/kernel.sh"}},
			{"op": "callTool", "name": "skills_run_script", "arguments": map[string]any{"path": "scripts/fail.sh"}},
			{"op": "callTool", "name": "skills_read", "arguments": map[string]any{"path": "../guarded-hello/SKILL.md"}},
			{"op": "getPrompt", "name": "hello", "arguments": map[string]any{"arguments": `"Ada Lovelace" kindly`}},
			{"op": "readResource", "uri": "skill://index.json"},
			{"op": "callTool", "name": "skills_load", "arguments": map[string]any{"names": []string{"guarded-hello"}, "mode": "add"}},
			{"op": "callTool", "name": "skills_run_script", "arguments": map[string]any{"skill": "guarded-hello", "path": "scripts/ok.sh"}},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(clientDir, "client.mjs"), string(plan), "--",
		itBin, "mcp", "--root", root, "--config", cfgPath)
	cmd.Env = append(os.Environ(), "SKILLBOX_IMAGES="+itImages)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("MCP client: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var out mcpClientResult
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("client output: %v\n%s", err, stdout.String())
	}
	if _, ok := out.Capabilities["extensions"]; !ok || !strings.Contains(out.Instructions, "<available_skills>") {
		t.Errorf("capabilities %v, instructions %q", out.Capabilities, out.Instructions)
	}
	step := func(i int) json.RawMessage {
		r := out.Results[i]
		if r.Error != nil {
			t.Fatalf("step %d (%s %s) failed: %s", i, r.Op, r.Name, r.Error.Message)
		}
		return r.Result
	}
	tool := func(i int) toolResult {
		var tr toolResult
		if err := json.Unmarshal(step(i), &tr); err != nil {
			t.Fatal(err)
		}
		return tr
	}

	var tools struct{ Tools []struct{ Name string } }
	json.Unmarshal(step(0), &tools)
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"skills_list", "skills_load", "skills_read", "skills_run_script", "skills_run_code", "tools_check"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("tools %v lack %s", names, want)
		}
	}
	if r := tool(1); r.IsError {
		t.Errorf("load: %s", r.text())
	}
	if r := tool(2); r.IsError || r.StructuredContent.Content != "Be polite.\n" {
		t.Errorf("read: %+v", r)
	}

	kernel := tool(3)
	if kernel.IsError || kernel.StructuredContent.ExitCode != 0 || !strings.Contains(kernel.StructuredContent.Stdout, "gVisor") {
		t.Errorf("kernel.sh should run in gVisor (dmesg shows its kernel): %+v", kernel)
	}
	t.Logf("inside the sandbox:\n%s", kernel.StructuredContent.Stdout)
	var streamed bool
	for _, p := range out.Results[3].Progress {
		streamed = streamed || strings.HasPrefix(p.Message, "stdout: ")
	}
	if !streamed {
		t.Errorf("no output progress during the run: %+v", out.Results[3].Progress)
	}

	fail := tool(4)
	if !fail.IsError || fail.StructuredContent.ExitCode != 7 || !strings.Contains(fail.text(), "exited with code 7") || !strings.Contains(fail.text(), "no such customer") {
		t.Errorf("failing script should be a tool error with its exit code and stderr: %+v", fail)
	}
	if r := tool(5); !r.IsError || !strings.Contains(r.text(), "invalid_params") {
		t.Errorf("a path outside the skill should be refused: %+v", r)
	}

	var prompt struct {
		Messages []struct {
			Content struct{ Text string } `json:"content"`
		} `json:"messages"`
	}
	json.Unmarshal(step(6), &prompt)
	if len(prompt.Messages) != 1 || !strings.Contains(prompt.Messages[0].Content.Text, `Greet Ada Lovelace. The request was: "Ada Lovelace" kindly`) {
		t.Errorf("prompt = %+v", prompt)
	}

	var res struct{ Contents []struct{ Text string } }
	json.Unmarshal(step(7), &res)
	if len(res.Contents) != 1 || !strings.Contains(res.Contents[0].Text, `"uri": "skill://hello/scripts/kernel.sh"`) || !strings.Contains(res.Contents[0].Text, `"digest": "sha256:`) {
		t.Errorf("skill://index.json = %+v", res)
	}

	guarded := tool(9)
	if guarded.IsError || !strings.Contains(guarded.StructuredContent.Stdout, "approved run") {
		t.Errorf("run approved through elicitation: %+v", guarded)
	}
	if len(out.Elicitations) != 1 || !strings.Contains(out.Elicitations[0].Message, "approval") {
		t.Errorf("elicitations = %+v", out.Elicitations)
	}

	// Every run is in the audit trail the config names.
	trail := f.trail()
	for _, want := range []string{"scripts/kernel.sh", "scripts/fail.sh", "scripts/ok.sh"} {
		if !strings.Contains(trail, want) {
			t.Errorf("audit trail in %s does not mention %s", auditDir, want)
		}
	}
}

// TestMCPRefusedLineAudited: a line the real stdio server refuses (a member
// named twice, not JSON) gets a JSON-RPC error, leaves the server up, and
// is in the audit log as call.refused naming the refusal; the chain
// verifies.
func TestMCPRefusedLineAudited(t *testing.T) {
	runItNeed(t, "runsc")
	f := newMCPFixture(t)
	cmd := exec.Command(itBin, "mcp", "--root", f.root, "--config", f.cfgPath)
	cmd.Env = append(os.Environ(), "SKILLBOX_IMAGES="+itImages)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// exchange sends line and returns the next line that answers id.
	exchange := func(line, id string) string {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("writing to skillbox mcp: %v\n%s", err, stderr.String())
		}
		timeout := time.After(time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("skillbox mcp hung up waiting for id %s\n%s", id, stderr.String())
				}
				if strings.Contains(l, `"id":`+id+`,`) || strings.Contains(l, `"id":`+id+`}`) {
					return l
				}
			case <-timeout:
				t.Fatalf("no answer for id %s\n%s", id, stderr.String())
			}
		}
	}
	exchange(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, "1")
	io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	if got := exchange(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"skills_run_script","arguments":{"path":"scripts/kernel.sh","path":"scripts/fail.sh"}}}`, "2"); !strings.Contains(got, `"code":-32602`) || !strings.Contains(got, "appears twice") {
		t.Errorf("duplicate key answered %s", got)
	}
	if got := exchange(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, "3"); !strings.Contains(got, "skills_run_script") {
		t.Errorf("tools/list after the refusal: %s", got)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("skillbox mcp: %v\n%s", err, stderr.String())
	}
	if out, code := verify(t, f.auditDir); code != 0 {
		t.Fatalf("audit verify: exit %d\n%s", code, out)
	}
	var found bool
	for _, l := range strings.Split(f.trail(), "\n") {
		if strings.Contains(l, `"event":"call.refused"`) && strings.Contains(l, `"request_id":"2"`) &&
			strings.Contains(l, `appears twice in params.arguments`) && strings.Contains(l, `"transport":"mcp"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no call.refused record for the duplicate key in the audit log:\n%s", f.trail())
	}
}
