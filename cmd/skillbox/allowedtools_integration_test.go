//go:build integration

package main

// A skill's allowed-tools as the hosts it is written for
// mean it. Under the default config (built-in policy, tool_mode
// "restrict"), a skill declaring `allowed-tools: Read Write Edit Bash`
// runs its own script in gVisor through the daemon's socket and through
// `skillbox mcp`; a skill declaring only `Read` is refused, and the
// refusal quotes its list and says what to add. Run with
//
//	go test -tags integration -p 1 -count=1 -run TestAllowedTools ./cmd/skillbox/

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
)

// allowedToolsSkills writes the two test skills into a new root: one in a
// host's terms that must run, one that lists only Read.
func allowedToolsSkills(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "sbit-allowed-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o755)
	t.Cleanup(func() { os.RemoveAll(root) })
	writeFiles(t, root, map[string]string{
		"host-tools/SKILL.md": "---\nname: host-tools\ndescription: Writes a report with its own script, as skills written for agent hosts do.\n" +
			"allowed-tools: Read Write Edit Bash\n---\nRun `python3 scripts/report.py NAME`.\n",
		"host-tools/scripts/report.py": "import platform, sys\nprint('report for', sys.argv[1], 'on', platform.release())\n",
		"reader/SKILL.md":              "---\nname: reader\ndescription: Only reads its reference files.\nallowed-tools: Read\n---\nRead references/notes.md.\n",
		"reader/references/notes.md":   "Nothing to run here.\n",
		"reader/scripts/run.sh":        "#!/bin/sh\necho should not run\n",
	})
	return root
}

// wantReaderRefusal checks the refusal of reader's script: the cause (the
// skill's own list, quoted) and the smallest fix, not a policy rule.
func wantReaderRefusal(t *testing.T, via, msg string) {
	t.Helper()
	for _, want := range []string{
		`allowed-tools of skill "reader"`, `reader/SKILL.md`, `which lists "Read"`, `tool_mode "restrict"`,
		`add Bash or skills.run_script to the skill's allowed-tools, or set tool_mode = "preapprove" in the daemon block`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: refusal %q lacks %q", via, msg, want)
		}
	}
	if strings.Contains(msg, "cannot be overridden") {
		t.Errorf("%s: refusal %q blames a policy rule; none denied", via, msg)
	}
}

func TestAllowedToolsDaemon(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t, allowedToolsSkills(t))
	// The default config's policy: no policy block (the built-in rule),
	// tool_mode not set.
	b, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), itPolicy, "", 1)
	if cfg == string(b) || strings.Contains(cfg, "policy ") || strings.Contains(cfg, "tool_mode") {
		t.Fatalf("cannot turn the test config into the default policy:\n%s", cfg)
	}
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"host-tools"}}))
	res := must[*api.RunScriptResult](t, "run_script")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"ada"}}, Path: "scripts/report.py"}))
	if res.ExitCode != 0 || res.Runtime != "runsc" || !strings.Contains(res.Stdout, "report for ada on") {
		t.Fatalf("host-tools' script under the default config: %+v", res)
	}
	t.Logf("Read Write Edit Bash: %s ran in %s (%d ms)", "scripts/report.py", res.Runtime, res.DurationMS)
	// Read covers skills.read for both skills.
	must[*api.ReadResult](t, "skills.read")(c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Path: "SKILL.md"}))

	must[*api.LoadResult](t, "load reader")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"reader"}, Mode: api.LoadAdd}))
	must[*api.ReadResult](t, "reader's read")(c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: sid, Skill: "reader", Path: "references/notes.md"}))
	_, err = c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "reader", Path: "scripts/run.sh"})
	e := wantKind(t, "reader's script", err, api.KindDenied)
	wantReaderRefusal(t, "socket", e.Message)

	// The decision is in the audit log with the same cause.
	found := false
	for _, r := range d.records() {
		if r.Decision != nil && r.Decision.Effect == "deny" && r.Skill != nil && r.Skill.Name == "reader" {
			found = strings.Contains(r.Decision.Rule, `allowed-tools of skill "reader"`) && r.Decision.Mode == "restrict"
		}
	}
	if !found {
		t.Errorf("no audited deny naming reader's allowed-tools")
	}
}

func TestAllowedToolsMCP(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python")
	root := allowedToolsSkills(t)
	base := t.TempDir()
	t.Cleanup(func() { unmountNullNetns(filepath.Join(base, "runsc")) })
	cfgPath := filepath.Join(base, "skillbox.hcl")
	// The default config but for where things are: no policy block, no
	// tool_mode.
	cfg := `
daemon { audit_dir = "` + filepath.Join(base, "audit") + `" }
images { dir = "` + itImages + `" }
runtime "runsc" { state_dir = "` + filepath.Join(base, "runsc") + `" }
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.Command(itBin, "mcp", "--root", root, "--config", cfgPath)
	cmd.Env = append(os.Environ(), "SKILLBOX_IMAGES="+itImages)
	cmd.Dir = t.TempDir() // the MCP server's workspace: nothing of the repository
	client := sdk.NewClient(&sdk.Implementation{Name: "skillbox-allowed-tools-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to skillbox mcp: %v", err)
	}
	defer cs.Close()

	if res, text := mcpCallTool(t, ctx, cs, "skills_load", map[string]any{"names": []string{"host-tools"}}); res.IsError {
		t.Fatalf("load: %s", text)
	}
	res, text := mcpCallTool(t, ctx, cs, "skills_run_script", map[string]any{"path": "scripts/report.py", "args": []string{"grace"}})
	sc, _ := json.Marshal(res.StructuredContent)
	var run struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	json.Unmarshal(sc, &run)
	if res.IsError || run.ExitCode != 0 || !strings.Contains(run.Stdout, "report for grace on") || !strings.Contains(run.Stdout, "gvisor") {
		t.Fatalf("host-tools' script over MCP under the default config: %s %s", text, sc)
	}

	if res, text := mcpCallTool(t, ctx, cs, "skills_load", map[string]any{"names": []string{"reader"}}); res.IsError {
		t.Fatalf("load reader: %s", text)
	}
	res, text = mcpCallTool(t, ctx, cs, "skills_run_script", map[string]any{"skill": "reader", "path": "scripts/run.sh"})
	if !res.IsError || !strings.Contains(text, "denied") {
		t.Fatalf("reader's script over MCP: want a denied tool error, got %s", text)
	}
	wantReaderRefusal(t, "mcp", text)
}
