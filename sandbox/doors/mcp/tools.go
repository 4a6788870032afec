package mcp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
)

// Tool names. MCP hosts prefix them with the server's name
// (mcp__skillbox__skills_run_script), and some hosts allow only
// [A-Za-z0-9_-] in tool names, so the dots of skillbox's method names
// become underscores.
const (
	ToolList      = "skills_list"
	ToolLoad      = "skills_load"
	ToolUnload    = "skills_unload"
	ToolRead      = "skills_read"
	ToolRunScript = "skills_run_script"
	ToolRunCode   = "skills_run_code"
	ToolCheck     = "tools_check"
)

// The tool inputs are the service's params without session_id: the
// connection is the session.

// ListInput is skills_list's input.
type ListInput struct {
	Query string `json:"query,omitempty" jsonschema:"only skills whose name, description or tags contain this text"`
}

// ListOutput is skills_list's output.
type ListOutput struct {
	Skills []api.SkillInfo `json:"skills" jsonschema:"the skills, sorted by name; model_invocable false marks skills only a user may invoke"`
}

// LoadInput is skills_load's input.
type LoadInput struct {
	Names []string `json:"names" jsonschema:"names of the skills to load"`
	Mode  string   `json:"mode,omitempty" jsonschema:"replace (default): these become the active skills; add: load them beside the active ones"`
}

// UnloadInput is skills_unload's input.
type UnloadInput struct {
	Names []string `json:"names,omitempty" jsonschema:"names of the skills to unload"`
	All   bool     `json:"all,omitempty" jsonschema:"unload every active skill"`
}

// ReadInput is skills_read's input.
type ReadInput struct {
	Skill  string `json:"skill,omitempty" jsonschema:"the loaded skill to read from (default: the most recently loaded)"`
	Path   string `json:"path" jsonschema:"path relative to the skill directory, like references/guide.md"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to start at"`
	Length int64  `json:"length,omitempty" jsonschema:"number of bytes to read (default: to the end, capped)"`
}

// RunScriptInput is skills_run_script's input.
type RunScriptInput struct {
	Skill          string            `json:"skill,omitempty" jsonschema:"the loaded skill whose script to run (default: the most recently loaded)"`
	Path           string            `json:"path" jsonschema:"the script, relative to the skill directory, like scripts/extract.py; its extension picks the interpreter"`
	Args           []string          `json:"args,omitempty" jsonschema:"command-line arguments"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables (only names the policy allows)"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text given on standard input"`
	TimeoutMS      int64             `json:"timeout_ms,omitempty" jsonschema:"wall-clock limit in milliseconds (capped by policy)"`
	Files          []api.File        `json:"files,omitempty" jsonschema:"input files put in the working directory: name (relative) and content (base64); for programs, not for the user's files (those are in the workspace)"`
	Inputs         []string          `json:"inputs,omitempty" jsonschema:"paths or globs of the workspace (the user's project) the run is given in its working directory, like report.pdf or data/**; default: the whole workspace"`
	ShowImages     bool              `json:"show_images,omitempty" jsonschema:"also return the first small image the run wrote (PNG, JPEG, GIF, WebP up to 256 KiB) as image content, to look at it"`
	ConfirmationID string            `json:"confirmation_id,omitempty" jsonschema:"the id of an approved confirmation, to repeat a run that needed approval"`
	Background     bool              `json:"background,omitempty" jsonschema:"start the run in this conversation's sandbox and return at once with its run_id (a dev server, a long build); follow it with runs_logs, runs_wait, runs_signal. Only for skills whose policy keeps a sandbox per session"`
}

// RunCodeInput is skills_run_code's input.
type RunCodeInput struct {
	Language       string            `json:"language" jsonschema:"python, shell or node"`
	Code           string            `json:"code" jsonschema:"the program; every active skill is mounted read-only and importable"`
	Args           []string          `json:"args,omitempty" jsonschema:"command-line arguments"`
	Files          []api.File        `json:"files,omitempty" jsonschema:"input files put in the working directory: name (relative) and content (base64)"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text given on standard input"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables (only names the policy allows)"`
	TimeoutMS      int64             `json:"timeout_ms,omitempty" jsonschema:"wall-clock limit in milliseconds (capped by policy)"`
	Inputs         []string          `json:"inputs,omitempty" jsonschema:"paths or globs of the workspace (the user's project) the run is given in its working directory, like report.pdf or data/**; default: the whole workspace"`
	ShowImages     bool              `json:"show_images,omitempty" jsonschema:"also return the first small image the run wrote (PNG, JPEG, GIF, WebP up to 256 KiB) as image content, to look at it"`
	ConfirmationID string            `json:"confirmation_id,omitempty" jsonschema:"the id of an approved confirmation, to repeat a run that needed approval"`
	Background     bool              `json:"background,omitempty" jsonschema:"start the code in this conversation's sandbox and return at once with its run_id; follow it with runs_logs, runs_wait, runs_signal"`
}

// CheckInput is tools_check's input.
type CheckInput struct {
	Tool  string `json:"tool" jsonschema:"the host tool about to be called, in the ecosystem's syntax: Read, Bash, skills.run_script"`
	Input any    `json:"input,omitempty" jsonschema:"the tool's input, for rules that look at it (a Bash command, a path)"`
	// Approvals of hooks policy holds (a hook is a run of its skill); a
	// host that answers the elicitation never needs them.
	ConfirmationID  string   `json:"confirmation_id,omitempty" jsonschema:"the id of an approved confirmation of a held hook, to repeat a check that needed approval"`
	ConfirmationIDs []string `json:"confirmation_ids,omitempty" jsonschema:"the ids of approved confirmations, when several hooks were held"`
}

func (c *Conn) addTools() {
	ro := &sdk.ToolAnnotations{ReadOnlyHint: true}
	sdk.AddTool(c.mcp, &sdk.Tool{
		Name:        ToolList,
		Title:       "List skills",
		Description: "List the Agent Skills skillbox serves: name, description, digest, tags.",
		Annotations: ro,
	}, c.list)
	c.addLoadTool(nil)
	sdk.AddTool(c.mcp, &sdk.Tool{
		Name:        ToolUnload,
		Title:       "Unload skills",
		Description: "Unload active skills (by name, or all) from this conversation.",
	}, c.unload)
	sdk.AddTool(c.mcp, &sdk.Tool{
		Name:        ToolRead,
		Title:       "Read a skill file",
		Description: "Read a file of a loaded skill (SKILL.md, references/, assets/, scripts/). Paths stay inside the skill directory.",
		Annotations: ro,
	}, c.read)
	sdk.AddTool(c.mcp, &sdk.Tool{
		Name:  ToolRunScript,
		Title: "Run a skill script",
		Description: "Run a script of a loaded skill in an isolated sandbox (gVisor by default; no network unless policy allows). " +
			"The interpreter comes from the extension. A non-zero exit is a tool error carrying exit_code and stderr. " +
			"Its working directory holds the workspace (the user's project, or the paths named in inputs); the files it writes there are applied back to the workspace where policy allows, and the result links them.",
	}, c.runScript)
	sdk.AddTool(c.mcp, &sdk.Tool{
		Name:  ToolRunCode,
		Title: "Run code",
		Description: "Run code you wrote (python, shell or node) in the same kind of sandbox as a skill script, " +
			"with every active skill mounted read-only, working in the workspace as skills_run_script does. A non-zero exit is a tool error carrying exit_code and stderr.",
	}, c.runCode)
	sdk.AddTool(c.mcp, &sdk.Tool{
		Name:        ToolCheck,
		Title:       "Check a tool call",
		Description: "Ask whether a tool call is allowed while the active skills are in force: decision allow, deny or confirm, and the rule that decided.",
		Annotations: ro,
	}, c.check)
	c.addRunTools()
}

// addLoadTool (re)registers skills_load with the catalog in its
// description, for hosts that show tools to the model but not the server's
// instructions; re-registering sends tools/list_changed.
func (c *Conn) addLoadTool(list []api.SkillInfo) {
	desc := "Load Agent Skills into this conversation by name: their instructions apply and their scripts can be run. Load a skill before following it."
	var names []string
	for _, s := range list {
		if s.ModelInvocable {
			names = append(names, s.Name)
		}
	}
	if len(names) > 0 {
		desc += " Available: " + strings.Join(names, ", ") + "."
	}
	sdk.AddTool(c.mcp, &sdk.Tool{Name: ToolLoad, Title: "Load skills", Description: desc}, c.load)
}

func (c *Conn) list(ctx context.Context, _ *sdk.CallToolRequest, in ListInput) (*sdk.CallToolResult, ListOutput, error) {
	res, err := c.s.svc.ListSkills(ctx, c.caller, api.ListSkillsParams{SessionID: c.session, Query: in.Query})
	if err != nil {
		return nil, ListOutput{}, toolError(err)
	}
	if res == nil {
		res = []api.SkillInfo{}
	}
	return nil, ListOutput{Skills: res}, nil
}

func (c *Conn) load(ctx context.Context, _ *sdk.CallToolRequest, in LoadInput) (*sdk.CallToolResult, *api.LoadResult, error) {
	res, err := c.s.svc.LoadSkills(ctx, c.caller, api.LoadParams{SessionID: c.session, Names: in.Names, Mode: in.Mode})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, res, nil
}

func (c *Conn) unload(ctx context.Context, _ *sdk.CallToolRequest, in UnloadInput) (*sdk.CallToolResult, *api.LoadResult, error) {
	res, err := c.s.svc.UnloadSkills(ctx, c.caller, api.UnloadParams{SessionID: c.session, Names: in.Names, All: in.All})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, res, nil
}

func (c *Conn) read(ctx context.Context, _ *sdk.CallToolRequest, in ReadInput) (*sdk.CallToolResult, *api.ReadResult, error) {
	res, err := c.s.svc.ReadSkillFile(ctx, c.caller, api.ReadParams{
		SessionID: c.session, Skill: in.Skill, Path: in.Path, Offset: in.Offset, Length: in.Length,
	})
	if err != nil {
		return nil, nil, toolError(err)
	}
	// The file's text is the content a model reads; the rest is metadata.
	text := res.Content
	if res.Encoding != "utf-8" {
		text = fmt.Sprintf("%s is binary (%d bytes, sha256 %s); its base64 content is in the structured result", res.Path, res.Size, res.SHA256)
	} else if res.Truncated {
		text += fmt.Sprintf("\n[truncated: %s has %d bytes; read on with offset and length]", res.Path, res.Size)
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, res, nil
}

func (c *Conn) check(ctx context.Context, req *sdk.CallToolRequest, in CheckInput) (*sdk.CallToolResult, *api.CheckToolResult, error) {
	p := api.CheckToolParams{SessionID: c.session, Tool: in.Tool, ConfirmationID: in.ConfirmationID, ConfirmationIDs: in.ConfirmationIDs}
	if in.Input != nil {
		raw, err := jsonMarshal(in.Input)
		if err != nil {
			return nil, nil, fmt.Errorf("invalid_params: input: %w", err)
		}
		p.Input = raw
	}
	// A hook policy holds for confirmation is a held run, asked about
	// like one of skills_run_script.
	var res *api.CheckToolResult
	ask, err := c.withConfirmation(ctx, req, ToolCheck, func(ids []string) error {
		q := p
		q.ConfirmationIDs = append(slices.Clone(p.ConfirmationIDs), ids...)
		var err error
		res, err = c.s.svc.CheckTool(ctx, c.caller, q)
		return err
	})
	if ask != nil || err != nil {
		return ask, nil, err
	}
	return nil, res, nil
}

func (c *Conn) runScript(ctx context.Context, req *sdk.CallToolRequest, in RunScriptInput) (*sdk.CallToolResult, *RunOutput, error) {
	p := api.RunScriptParams{
		RunInputs: api.RunInputs{SessionID: c.session, Args: in.Args, Env: in.Env, Stdin: in.Stdin, TimeoutMS: in.TimeoutMS, Files: in.Files, ConfirmationID: in.ConfirmationID, Background: in.Background, WorkspaceParams: c.runWorkspace(ctx, req, in.Background, in.Inputs)},
		Skill:     in.Skill,
		Path:      in.Path,
	}
	return c.run(ctx, req, ToolRunScript, &p.RunInputs, func(ctx context.Context) (*api.RunScriptResult, error) {
		return c.s.svc.RunScript(ctx, c.caller, p)
	}, in.ShowImages)
}

func (c *Conn) runCode(ctx context.Context, req *sdk.CallToolRequest, in RunCodeInput) (*sdk.CallToolResult, *RunOutput, error) {
	p := api.RunCodeParams{
		RunInputs: api.RunInputs{SessionID: c.session, Args: in.Args, Files: in.Files, Stdin: in.Stdin, Env: in.Env, TimeoutMS: in.TimeoutMS, ConfirmationID: in.ConfirmationID, Background: in.Background, WorkspaceParams: c.runWorkspace(ctx, req, in.Background, in.Inputs)},
		Language:  in.Language,
		Code:      in.Code,
	}
	return c.run(ctx, req, ToolRunCode, &p.RunInputs, func(ctx context.Context) (*api.RunScriptResult, error) {
		return c.s.svc.RunCode(ctx, c.caller, p)
	}, in.ShowImages)
}

// run makes a run call (call, with the run's inputs in), with progress
// from its events, asks the user to confirm it when policy holds it for
// approval (in gets the confirmation id to use, if any, and whether to
// stream events), and returns its result sized for the model (runResult):
// a failed script is a tool error that still carries it.
func (c *Conn) run(ctx context.Context, req *sdk.CallToolRequest, tool string, in *api.RunInputs, call func(context.Context) (*api.RunScriptResult, error), showImages bool) (*sdk.CallToolResult, *RunOutput, error) {
	var res *api.RunScriptResult
	ask, err := c.withConfirmation(ctx, req, tool, func(ids []string) error {
		ctx, stream, stop := c.progress(ctx, req)
		defer stop()
		var id string
		if len(ids) > 0 {
			id = ids[0] // a run asks about one confirmation
		}
		in.Stream = stream
		if id != "" {
			in.ConfirmationID = id
		}
		var err error
		res, err = call(ctx)
		return err
	})
	if ask != nil || err != nil {
		return ask, nil, err
	}
	tr, out := c.runResult(res)
	if showImages {
		if img := firstImage(res); img != nil {
			tr.Content = append(tr.Content, img)
		}
	}
	return tr, out, nil
}

// withConfirmation makes a call that policy may hold for approval: the
// retry of an elicitation first approves (or denies) what the user
// answered and passes the approved ids to call; a confirmation_required
// refusal of an ordinary call becomes an elicitation (ask, when the client
// can be asked). Every other error is returned as a tool error.
func (c *Conn) withConfirmation(ctx context.Context, req *sdk.CallToolRequest, tool string, call func(ids []string) error) (ask *sdk.CallToolResult, err error) {
	ids, answered, err := c.elicitationAnswer(ctx, req, tool)
	if err != nil {
		return nil, err
	}
	if err := call(ids); err != nil {
		if !answered {
			if ask := c.askConfirmation(ctx, req, tool, err); ask != nil {
				return ask, nil
			}
		}
		return nil, toolError(err)
	}
	return nil, nil
}
