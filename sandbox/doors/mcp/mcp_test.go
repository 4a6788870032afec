package mcp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/mcp"
)

// connect serves svc to an SDK client over the in-memory transport.
func connect(t *testing.T, svc api.Service, opts mcp.Options, copts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	opts.PollInterval = -1
	srv := mcp.New(svc, opts)
	st, ct := sdk.NewInMemoryTransports()
	conn, err := srv.Connect(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, copts)
	if err := sdk.AddSendingCustomMethod[*skillsListParams, *skillsListResult](client, "skills/list"); err != nil {
		t.Fatal(err)
	}
	if err := sdk.AddSendingCustomMethod[*skillsGetParams, *skillsGetResult](client, "skills/get"); err != nil {
		t.Fatal(err)
	}
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// structured decodes a result's structuredContent into v.
func structured(t *testing.T, res *sdk.CallToolResult, v any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsListLoadReadRun(t *testing.T) {
	f := newFake(t)
	f.run = func(_ context.Context, p api.RunScriptParams) (*api.RunScriptResult, error) {
		if p.Path == "scripts/fail.sh" {
			return &api.RunScriptResult{RunID: "r2", Path: p.Path, Stderr: "something broke\n", Summary: outcome.Summary{ExitCode: 3, Reason: runtime.ReasonExit}}, nil
		}
		return &api.RunScriptResult{RunID: "r1", Path: p.Path, Stdout: "hello, " + strings.Join(p.Args, " ") + "\n", Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	cs := connect(t, f, mcp.Options{}, nil)

	if !strings.Contains(cs.InitializeResult().Instructions, "<available_skills>") {
		t.Errorf("instructions lack the catalog: %q", cs.InitializeResult().Instructions)
	}
	if _, ok := cs.InitializeResult().Capabilities.Extensions[mcp.SkillsExtension]; !ok {
		t.Errorf("capabilities do not declare %s: %+v", mcp.SkillsExtension, cs.InitializeResult().Capabilities)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*sdk.Tool{}
	for _, tool := range tools.Tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{mcp.ToolList, mcp.ToolLoad, mcp.ToolUnload, mcp.ToolRead, mcp.ToolRunScript, mcp.ToolRunCode, mcp.ToolCheck} {
		tool := byName[name]
		if tool == nil || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s missing or without input/output schema: %+v", name, tool)
		}
	}
	if d := byName[mcp.ToolLoad].Description; !strings.Contains(d, "hello") || strings.Contains(d, "manual") {
		t.Errorf("skills_load description should list model-invocable skills only: %q", d)
	}

	var list mcp.ListOutput
	structured(t, call(t, cs, mcp.ToolList, map[string]any{}), &list)
	if len(list.Skills) != 2 || list.Skills[0].Name != "hello" || list.Skills[1].ModelInvocable {
		t.Errorf("skills_list = %+v", list.Skills)
	}

	t.Run("read before load is refused", func(t *testing.T) {
		res := call(t, cs, mcp.ToolRead, map[string]any{"skill": "hello", "path": "SKILL.md"})
		if !res.IsError || !strings.Contains(text(res), "invalid_params") || !strings.Contains(text(res), "load it first") {
			t.Errorf("read before load: isError=%v %q", res.IsError, text(res))
		}
	})

	var receipt api.LoadResult
	structured(t, call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"hello"}}), &receipt)
	if len(receipt.ActiveSkills) != 1 || receipt.ActiveSkills[0].Name != "hello" || !strings.HasPrefix(receipt.ActiveSkills[0].Digest, "sha256:") {
		t.Errorf("skills_load receipt = %+v", receipt)
	}

	t.Run("unknown skill is a tool error saying what to do", func(t *testing.T) {
		res := call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"nope"}})
		if !res.IsError || !strings.HasPrefix(text(res), "not_found: ") || !strings.Contains(text(res), "skills.list") {
			t.Errorf("load nope: isError=%v %q", res.IsError, text(res))
		}
	})

	t.Run("read", func(t *testing.T) {
		res := call(t, cs, mcp.ToolRead, map[string]any{"path": "references/guide.md"})
		var rr api.ReadResult
		structured(t, res, &rr)
		want, _ := os.ReadFile("testdata/skills/hello/references/guide.md")
		sum := sha256.Sum256(want)
		if res.IsError || rr.Content != string(want) || rr.SHA256 != hex.EncodeToString(sum[:]) || text(res) != string(want) {
			t.Errorf("read = %+v, text %q", rr, text(res))
		}
	})

	for _, p := range []string{"../manual/SKILL.md", "/etc/passwd", "references/../../manual/SKILL.md"} {
		t.Run("path outside the skill: "+p, func(t *testing.T) {
			res := call(t, cs, mcp.ToolRead, map[string]any{"path": p})
			if !res.IsError || !strings.Contains(text(res), "invalid_params") || res.StructuredContent != nil {
				t.Errorf("read %s: isError=%v %q structured=%v", p, res.IsError, text(res), res.StructuredContent)
			}
		})
	}

	t.Run("run", func(t *testing.T) {
		res := call(t, cs, mcp.ToolRunScript, map[string]any{"path": "scripts/greet.sh", "args": []string{"Ada"}})
		var rr api.RunScriptResult
		structured(t, res, &rr)
		if res.IsError || rr.Stdout != "hello, Ada\n" || rr.ExitCode != 0 {
			t.Errorf("run = isError %v %+v", res.IsError, rr)
		}
	})

	t.Run("failing script is a tool error with exit code and stderr", func(t *testing.T) {
		res := call(t, cs, mcp.ToolRunScript, map[string]any{"path": "scripts/fail.sh"})
		var rr api.RunScriptResult
		structured(t, res, &rr)
		if !res.IsError || rr.ExitCode != 3 || rr.Stderr != "something broke\n" ||
			!strings.Contains(text(res), "exited with code 3") || !strings.Contains(text(res), "something broke") {
			t.Errorf("failing run: isError=%v %+v text %q", res.IsError, rr, text(res))
		}
	})

	t.Run("run_code refusal", func(t *testing.T) {
		res := call(t, cs, mcp.ToolRunCode, map[string]any{"language": "python", "code": "print(1)"})
		if !res.IsError || !strings.HasPrefix(text(res), "unavailable: ") {
			t.Errorf("run_code: isError=%v %q", res.IsError, text(res))
		}
	})

	t.Run("tools_check passes the input through", func(t *testing.T) {
		var cr api.CheckToolResult
		structured(t, call(t, cs, mcp.ToolCheck, map[string]any{"tool": "Bash", "input": map[string]any{"command": "ls"}}), &cr)
		if cr.Decision != "allow" || cr.Reason != `{"command":"ls"}` {
			t.Errorf("tools_check = %+v", cr)
		}
	})
}

func TestPrompts(t *testing.T) {
	f := newFake(t)
	cs := connect(t, f, mcp.Options{}, nil)
	ctx := context.Background()
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A prompt is a user invocation: the skill only a person may invoke
	// is one too.
	if len(prompts.Prompts) != 2 || prompts.Prompts[0].Name != "hello" || prompts.Prompts[1].Name != "manual" || len(prompts.Prompts[0].Arguments) != 1 {
		t.Fatalf("prompts = %+v (want both user-invocable skills)", prompts.Prompts)
	}
	for _, tt := range []struct{ args, want string }{
		{`"Ada Lovelace" please`, "Greet Ada Lovelace warmly; the whole request was: \"Ada Lovelace\" please"},
		{"", "Greet  warmly; the whole request was: \n"},
	} {
		res, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "hello", Arguments: map[string]string{mcp.PromptArgument: tt.args}})
		if err != nil {
			t.Fatal(err)
		}
		got := res.Messages[0].Content.(*sdk.TextContent).Text
		if !strings.Contains(got, tt.want) || strings.Contains(got, "---") || res.Messages[0].Role != "user" {
			t.Errorf("prompt with %q = %q, want it to contain %q (and no frontmatter)", tt.args, got, tt.want)
		}
		if !strings.Contains(res.Description, "Greets people") {
			t.Errorf("prompt description = %q", res.Description)
		}
	}
	if !f.called("load:s1") {
		t.Errorf("getting a prompt should load the skill into the connection's session; calls %v", f.calls)
	}
	res, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "manual"})
	if err != nil || !strings.Contains(res.Messages[0].Content.(*sdk.TextContent).Text, "Manual steps.") {
		t.Errorf("a skill that disables model invocation is a user's prompt: %+v, %v", res, err)
	}
	if !f.called("activate:manual:user") {
		t.Errorf("the prompt should be a user invocation of skills.activate; calls %v", f.calls)
	}
}

func TestResources(t *testing.T) {
	f := newFake(t)
	cs := connect(t, f, mcp.Options{}, nil)
	ctx := context.Background()

	res, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range res.Resources {
		uris = append(uris, r.URI)
	}
	for _, want := range []string{mcp.IndexURI, "skill://hello/SKILL.md", "skill://manual/SKILL.md"} {
		if !strings.Contains(strings.Join(uris, " "), want) {
			t.Errorf("resources %v lack %s", uris, want)
		}
	}

	idx, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcp.IndexURI})
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Skills []mcp.SkillEntry `json:"skills"`
	}
	if err := json.Unmarshal([]byte(idx.Contents[0].Text), &index); err != nil {
		t.Fatal(err)
	}
	var hello *mcp.SkillEntry
	for i := range index.Skills {
		if index.Skills[i].Frontmatter["name"] == "hello" {
			hello = &index.Skills[i]
		}
	}
	if hello == nil || hello.URI != "skill://hello/SKILL.md" || hello.Frontmatter["license"] != "Apache-2.0" {
		t.Fatalf("index = %+v", index)
	}
	files := map[string]string{}
	for _, r := range hello.Resources {
		files[r.URI] = r.Digest
	}
	for _, rel := range []string{"SKILL.md", "references/guide.md", "scripts/greet.sh", "scripts/fail.sh"} {
		data, _ := os.ReadFile("testdata/skills/hello/" + rel)
		sum := sha256.Sum256(data)
		if got := files["skill://hello/"+rel]; got != "sha256:"+hex.EncodeToString(sum[:]) {
			t.Errorf("index digest of %s = %q", rel, got)
		}
	}

	// skills/list and skills/get (the extension's methods) agree with the index.
	list, err := sdk.CallCustomMethod[*skillsListParams, *skillsListResult](ctx, cs, "skills/list", &skillsListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Skills) != len(index.Skills) || list.ResultType != "complete" {
		t.Errorf("skills/list = %+v, index %+v", list, index)
	}
	one, err := sdk.CallCustomMethod[*skillsGetParams, *skillsGetResult](ctx, cs, "skills/get", &skillsGetParams{URI: "skill://hello/SKILL.md"})
	if err != nil {
		t.Fatal(err)
	}
	if one.Skill.URI != hello.URI || len(one.Skill.Resources) != len(hello.Resources) {
		t.Errorf("skills/get = %+v, want %+v", one.Skill, hello)
	}
	_, err = sdk.CallCustomMethod[*skillsGetParams, *skillsGetResult](ctx, cs, "skills/get", &skillsGetParams{URI: "skill://nope/SKILL.md"})
	if err == nil || !strings.Contains(err.Error(), "no skill is served at skill://nope/SKILL.md") {
		t.Errorf("skills/get of an unknown skill: %v", err)
	}

	// A file read in full through the confined read, in several pieces (the
	// fake caps reads at 64 bytes), without loading the skill in the
	// connection's session.
	got, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "skill://hello/SKILL.md"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile("testdata/skills/hello/SKILL.md")
	if got.Contents[0].Text != string(want) || got.Contents[0].MIMEType != "text/markdown" {
		t.Errorf("SKILL.md resource = %q (%s)", got.Contents[0].Text, got.Contents[0].MIMEType)
	}
	if f.called("load:s1") {
		t.Error("reading a resource loaded the skill into the connection's session")
	}
	for _, uri := range []string{"skill://hello/../manual/SKILL.md", "skill://hello/nope.md", "skill://nope/SKILL.md"} {
		if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("reading %s should fail", uri)
		}
	}
}

// The skills extension's methods, as a client sends them.
type (
	skillsListParams struct{ sdk.ParamsBase }
	skillsListResult struct {
		sdk.ResultBase
		ResultType string           `json:"resultType"`
		Skills     []mcp.SkillEntry `json:"skills"`
	}
	skillsGetParams struct {
		sdk.ParamsBase
		URI string `json:"uri"`
	}
	skillsGetResult struct {
		sdk.ResultBase
		Skill mcp.SkillEntry `json:"skill"`
	}
)

func TestElicitation(t *testing.T) {
	for _, tt := range []struct {
		name        string
		action      string
		approveErr  error
		wantError   string
		wantCalls   []string
		wantApprove bool
	}{
		{name: "approve", action: "accept", wantCalls: []string{"approve:c1", "run:scripts/greet.sh:c1"}},
		{name: "decline", action: "decline", wantError: "denied: the user declined", wantCalls: []string{"deny:c1"}},
		{name: "approval refused", action: "accept", approveErr: api.ErrDenied, wantError: "ask an approver to approve confirmation c1", wantCalls: []string{"approve:c1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.approve = func(string) error { return tt.approveErr }
			f.run = func(_ context.Context, p api.RunScriptParams) (*api.RunScriptResult, error) {
				if p.ConfirmationID != "c1" {
					return nil, &api.ConfirmationRequiredError{ID: "c1", Reason: "scripts need approval", Rule: "test.hcl:3", Digest: "sha256:abc"}
				}
				return &api.RunScriptResult{RunID: "r1", Path: p.Path, Stdout: "ran\n", Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
			}
			var asked string
			cs := connect(t, f, mcp.Options{ElicitApprovals: true}, &sdk.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					asked = req.Params.Message
					if tt.action == "accept" {
						return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
					}
					return &sdk.ElicitResult{Action: tt.action}, nil
				},
			})
			call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"hello"}})
			res := call(t, cs, mcp.ToolRunScript, map[string]any{"path": "scripts/greet.sh"})
			if !strings.Contains(asked, "scripts need approval") || !strings.Contains(asked, "sha256:abc") || !strings.Contains(asked, "scripts/greet.sh") {
				t.Errorf("the user was asked %q", asked)
			}
			if tt.wantError == "" {
				if res.IsError || !strings.Contains(text(res), "ran") {
					t.Errorf("approved run: isError=%v %q", res.IsError, text(res))
				}
			} else if !res.IsError || !strings.Contains(text(res), tt.wantError) {
				t.Errorf("result isError=%v %q, want an error containing %q", res.IsError, text(res), tt.wantError)
			}
			for _, c := range tt.wantCalls {
				if !f.called(c) {
					t.Errorf("service calls %v lack %s", f.calls, c)
				}
			}
		})
	}

	t.Run("without elicitation the error names the confirmation", func(t *testing.T) {
		f := newFake(t)
		f.run = func(context.Context, api.RunScriptParams) (*api.RunScriptResult, error) {
			return nil, &api.ConfirmationRequiredError{ID: "c9", Reason: "scripts need approval", Rule: "test.hcl:3", Digest: "sha256:abc"}
		}
		cs := connect(t, f, mcp.Options{ElicitApprovals: true}, nil)
		res := call(t, cs, mcp.ToolRunScript, map[string]any{"path": "scripts/greet.sh"})
		if !res.IsError || !strings.HasPrefix(text(res), "confirmation_required: ") || !strings.Contains(text(res), "confirmation_id=c9") {
			t.Errorf("isError=%v %q", res.IsError, text(res))
		}
	})
}

func TestProgress(t *testing.T) {
	f := newFake(t)
	f.run = func(ctx context.Context, p api.RunScriptParams) (*api.RunScriptResult, error) {
		sink := api.EventSinkFrom(ctx)
		if !p.Stream || sink == nil {
			return nil, api.ErrInternal
		}
		sink(api.RunStartedEvent{RunID: "r1", Skill: "hello", Path: p.Path})
		sink(api.RunOutputEvent{RunID: "r1", Stream: api.StreamStdout, Seq: 1, Data: "line 1\n"})
		sink(api.RunOutputEvent{RunID: "r1", Stream: api.StreamStdout, Seq: 2, Data: "line 2\n"})
		sink(api.RunExitedEvent{RunID: "r1", Reason: string(runtime.ReasonExit)})
		return &api.RunScriptResult{RunID: "r1", Path: p.Path, Stdout: "line 1\nline 2\n", Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	got := make(chan string, 10)
	cs := connect(t, f, mcp.Options{}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			got <- req.Params.Message
		},
	})
	params := &sdk.CallToolParams{Name: mcp.ToolRunScript, Arguments: map[string]any{"path": "scripts/greet.sh"}}
	params.SetProgressToken("tok")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("run: %v %v", err, res)
	}
	var msgs []string
	for len(msgs) < 4 {
		msgs = append(msgs, <-got)
	}
	if !strings.Contains(msgs[0], "started") || msgs[1] != "stdout: line 1" || msgs[2] != "stdout: line 2" || !strings.Contains(msgs[3], "ended") {
		t.Errorf("progress messages = %q", msgs)
	}
}
