//go:build integration

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
)

// blockedPolicy adds a rule that denies running the blocked-* skills.
const blockedPolicy = `
policy "blocked" {
  skills = ["blocked-*"]
  deny   = ["skills.run_script"]
}
`

// frontEndRun is one run_script request as every front end takes it.
type frontEndRun struct {
	skill, path string
	env         map[string]string
}

// frontEndOutcome is what a front end made of it: the run's stdout, or the
// refusal's kind (where the front end names kinds) and text.
type frontEndOutcome struct {
	stdout string
	kind   string // "" for the CLI, which prints one line without a kind
	text   string
	ran    bool
}

// TestAuthorizationAcrossFrontEnds puts the same requests through the
// three front ends — `skillbox run`, JSON-RPC on the daemon's socket with
// the Go client, `skillbox mcp` with the official Go SDK client over stdio
// — against the same policy, with real gVisor sandboxes, and expects the
// same decisions: the one authorization path behind all of them.
func TestAuthorizationAcrossFrontEnds(t *testing.T) {
	needDaemon(t)
	runItNeedImage(t, "shell")
	var roots []string
	for _, name := range []string{"open-hello", "guarded-hello", "blocked-hello"} {
		roots = append(roots, extraSkill(t, name, "scripts/hi.sh", "echo hi from "+name+"\n"))
	}

	// JSON-RPC: a real daemon with the shared policy plus the blocked rule.
	d := newItDaemon(t, roots...)
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.cfgPath, append(cfg, blockedPolicy...), 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"open-hello", "guarded-hello", "blocked-hello"}}))
	viaRPC := func(r frontEndRun) frontEndOutcome {
		res, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Env: r.env}, Skill: r.skill, Path: r.path})
		if err != nil {
			return frontEndOutcome{kind: api.KindOf(err), text: err.Error()}
		}
		return frontEndOutcome{ran: true, stdout: res.Stdout}
	}

	// The CLI and MCP: each its own config (an audit dir has one writer)
	// with the same policy.
	localConfig := func() string {
		base := t.TempDir()
		t.Cleanup(func() { unmountNullNetns(filepath.Join(base, "runsc")) })
		p := filepath.Join(base, "skillbox.hcl")
		runItWriteFile(t, p, `daemon { audit_dir = "`+filepath.Join(base, "audit")+`" }
images { dir = "`+itImages+`" }
runtime "runsc" { state_dir = "`+filepath.Join(base, "runsc")+`" }
`+itPolicy+blockedPolicy)
		return p
	}
	cliCfg, mcpCfg := localConfig(), localConfig()
	rootArgs := func() []string {
		var a []string
		for _, r := range roots {
			a = append(a, "--root", r)
		}
		return a
	}
	viaCLI := func(r frontEndRun) frontEndOutcome {
		args := append([]string{"run", "--config", cliCfg}, rootArgs()...)
		for k, v := range r.env {
			args = append(args, "--env", k+"="+v)
		}
		o := runItExec(t, append(args, r.skill, r.path)...)
		if o.code == 0 {
			return frontEndOutcome{ran: true, stdout: o.stdout}
		}
		return frontEndOutcome{text: o.stderr}
	}

	cmd := exec.Command(itBin, append(append([]string{"mcp"}, rootArgs()...), "--config", mcpCfg)...)
	cmd.Env = append(os.Environ(), "SKILLBOX_IMAGES="+itImages)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "frontends-test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to skillbox mcp: %v", err)
	}
	defer cs.Close()
	mcpCall := func(name string, args map[string]any) (*sdk.CallToolResult, string) {
		return mcpCallTool(t, ctx, cs, name, args)
	}
	if res, text := mcpCall("skills_load", map[string]any{"names": []string{"open-hello", "guarded-hello", "blocked-hello"}}); res.IsError {
		t.Fatalf("mcp load: %s", text)
	}
	viaMCP := func(r frontEndRun) frontEndOutcome {
		args := map[string]any{"skill": r.skill, "path": r.path}
		if r.env != nil {
			args["env"] = r.env
		}
		res, text := mcpCall("skills_run_script", args)
		if !res.IsError {
			var rr api.RunScriptResult
			b, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(b, &rr)
			return frontEndOutcome{ran: true, stdout: rr.Stdout}
		}
		kind, _, _ := strings.Cut(text, ": ")
		return frontEndOutcome{kind: kind, text: text}
	}

	for _, tc := range []struct {
		name string
		run  frontEndRun
		// Refusals: the kind (JSON-RPC and MCP) and what every front
		// end's message says.
		kind    string
		mention string
	}{
		{name: "allowed", run: frontEndRun{skill: "open-hello", path: "scripts/hi.sh"}},
		{name: "denied by a rule", run: frontEndRun{skill: "blocked-hello", path: "scripts/hi.sh"}, kind: api.KindDenied, mention: `policy "blocked"`},
		{name: "needs confirmation", run: frontEndRun{skill: "guarded-hello", path: "scripts/hi.sh"}, kind: api.KindConfirmationRequired, mention: "needs-approval"},
		{name: "path outside the skill", run: frontEndRun{skill: "open-hello", path: "../blocked-hello/scripts/hi.sh"}, kind: api.KindInvalidParams, mention: ".."},
		{name: "loader variable", run: frontEndRun{skill: "open-hello", path: "scripts/hi.sh", env: map[string]string{"LD_PRELOAD": "/work/x.so"}}, kind: api.KindInvalidParams, mention: "LD_PRELOAD"},
		{name: "variable no rule allows", run: frontEndRun{skill: "open-hello", path: "scripts/hi.sh", env: map[string]string{"UNLISTED_SETTING": "1"}}, kind: api.KindDenied, mention: "UNLISTED_SETTING"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, fe := range []struct {
				name string
				do   func(frontEndRun) frontEndOutcome
			}{{"cli", viaCLI}, {"jsonrpc", viaRPC}, {"mcp", viaMCP}} {
				got := fe.do(tc.run)
				if tc.kind == "" {
					if !got.ran || !strings.Contains(got.stdout, "hi from "+tc.run.skill) {
						t.Errorf("%s: want the run, got %+v", fe.name, got)
					}
					continue
				}
				if got.ran {
					t.Errorf("%s: ran although it should be refused (%s): %+v", fe.name, tc.kind, got)
					continue
				}
				if fe.name != "cli" && got.kind != tc.kind {
					t.Errorf("%s: kind %q, want %q: %s", fe.name, got.kind, tc.kind, got.text)
				}
				if !strings.Contains(got.text, tc.mention) {
					t.Errorf("%s: refusal does not mention %q: %s", fe.name, tc.mention, got.text)
				}
			}
		})
	}
}
