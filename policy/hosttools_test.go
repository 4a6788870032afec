package policy

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestExplainAllowedTools(t *testing.T) {
	cases := []struct {
		entry  string
		kind   EntryKind
		covers []string
	}{
		{"Bash", EntryHostShell, []string{"skills.run_script", "skills.run_code", "skills.render_command"}},
		{"bash", EntryHostShell, []string{"skills.run_script", "skills.run_code", "skills.render_command"}},
		{"Shell", EntryHostShell, []string{"skills.run_script", "skills.run_code", "skills.render_command"}},
		{"run_shell_command", EntryHostShell, []string{"skills.run_script", "skills.run_code", "skills.render_command"}},
		{"Bash(python:*)", EntryHostShell, []string{"skills.run_script", "skills.run_code", "skills.render_command(python:*)"}},
		{"Bash(./scripts/*)", EntryHostShell, []string{"skills.run_script", "skills.run_code", "skills.render_command(./scripts/*)"}},
		{"Bash(git:*)", EntryHostShell, []string{"skills.run_script", "skills.run_code", "skills.render_command(git:*)"}},
		{"Read", EntryHostRead, []string{"skills.read"}},
		{"Read(./docs/**)", EntryHostRead, []string{"skills.read"}},
		{"Glob", EntryHostRead, []string{"skills.read"}},
		{"grep", EntryHostRead, []string{"skills.read"}},
		{"Write", EntryHostWrite, nil},
		{"Edit", EntryHostWrite, nil},
		{"MultiEdit", EntryHostWrite, nil},
		{"WebFetch", EntryOther, nil},
		{"Task", EntryOther, nil},
		{"mcp__x__y", EntryOther, nil},
		{"mcp__*", EntryOther, nil},
		{"skills.run_script", EntrySkillbox, []string{"skills.run_script"}},
		{"skills.run_code(python)", EntrySkillbox, []string{"skills.run_code(python)"}},
		{"skills.load", EntrySkillbox, nil},
		{"skills.*", EntrySkillbox, []string{"skills.read", "skills.run_script", "skills.run_code", "skills.render_command"}},
		{"*", EntrySkillbox, []string{"skills.read", "skills.run_script", "skills.run_code", "skills.render_command"}},
		{"skills_run_script", EntrySkillbox, []string{"skills.run_script"}},
		{"skills_read", EntrySkillbox, []string{"skills.read"}},
		{"mcp__skillbox__skills_run_code", EntrySkillbox, []string{"skills.run_code"}},
		{"mcp__sb__skills_run_script", EntrySkillbox, []string{"skills.run_script"}},
		{"mcp____skills_run_script", EntryOther, nil},
		{"Bash(", EntryInvalid, nil},
		{"Bash()", EntryInvalid, nil},
		{"Re ad", EntryInvalid, nil},
	}
	for _, tc := range cases {
		t.Run(tc.entry, func(t *testing.T) {
			got := ExplainAllowedTools([]string{tc.entry})
			if len(got) != 1 {
				t.Fatalf("%d entries, want 1", len(got))
			}
			e := got[0]
			if e.Entry != tc.entry || e.Kind != tc.kind || !slices.Equal(e.Covers, tc.covers) {
				t.Errorf("got %q %q covers %q, want %q covers %q", e.Entry, e.Kind, e.Covers, tc.kind, tc.covers)
			}
			if e.Note == "" {
				t.Errorf("no note")
			}
		})
	}
}

// Every host name in the table maps whatever its case, and no name is in
// two rows.
func TestHostToolTable(t *testing.T) {
	seen := map[string]bool{}
	for _, row := range hostTools {
		if row.note == "" || row.kind == "" {
			t.Errorf("row %v is not explained", row.names)
		}
		for _, n := range row.names {
			k := strings.ToLower(n)
			if seen[k] {
				t.Errorf("%q is in two rows", n)
			}
			seen[k] = true
			for _, v := range []string{n, strings.ToLower(n), strings.ToUpper(n)} {
				if lookupHostTool(v) == nil {
					t.Errorf("%q not found", v)
				}
			}
		}
		for _, g := range row.grants {
			if !slices.Contains(skillboxTools, g) {
				t.Errorf("row %v grants %q, not a gated skillbox tool", row.names, g)
			}
		}
	}
}

// A !`command` of a skill's body is covered by the shell entry with the
// same command pattern a host applies to it.
func TestHostShellCoversRenderCommand(t *testing.T) {
	c, err := Parse([]byte(`policy "p" {
  skills = ["*"]
  tools  = ["skills.render_command", "skills.run_script"]
}`), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		allowed []string
		command string
		effect  Effect
	}{
		{[]string{"Bash(git status:*)"}, "git status --short", EffectAllow},
		{[]string{"Bash(git status:*)"}, "rm -rf /", EffectDeny},
		{[]string{"Bash(git status:*)"}, "git status; rm -rf /", EffectDeny},
		{[]string{"Bash"}, "date", EffectAllow},
		{[]string{"Read", "Write"}, "date", EffectDeny},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.allowed, " ")+"/"+tc.command, func(t *testing.T) {
			d := c.Decide(Request{Skill: "s", AllowedTools: tc.allowed, Tool: toolRenderCommand, Input: bash(tc.command)})
			if d.Effect != tc.effect {
				t.Errorf("%+v, want %s", d, tc.effect)
			}
		})
	}
}

// Every refusal names its cause and the smallest change that allows the
// call.
func TestRefusalNamesCauseAndFix(t *testing.T) {
	c := mustLoad(t, "testdata/rules.hcl")
	cases := []struct {
		name         string
		req          Request
		rule         string
		reason, fix  []string
		noFixContain string
	}{
		{"the skill's list, a script",
			Request{Skill: "plain", AllowedTools: []string{"Read"}, Source: "/s/plain/SKILL.md", Tool: "skills.run_script"},
			`allowed-tools of skill "plain" (/s/plain/SKILL.md)`,
			[]string{`which lists "Read"`, `Read covers skills.read`, `tool_mode "restrict"`},
			[]string{`add Bash or skills.run_script to the skill's allowed-tools`, `set tool_mode = "preapprove" in the daemon block`},
			"cannot be overridden"},
		{"the skill's list, code",
			Request{Skill: "plain", AllowedTools: []string{"Write", "Edit"}, Tool: "skills.run_code", Input: []byte(`{"language": "python"}`)},
			`allowed-tools of skill "plain"`,
			[]string{`which lists "Write Edit"`},
			[]string{`add Bash or skills.run_code`},
			"cannot be overridden"},
		{"the skill's list, a read",
			Request{Skill: "plain", AllowedTools: []string{"Bash"}, Tool: "skills.read"},
			`allowed-tools of skill "plain"`,
			[]string{`which lists "Bash"`, `Bash covers skills.run_script, skills.run_code, skills.render_command`},
			[]string{`add Read or skills.read`},
			"cannot be overridden"},
		{"the skill's list, a host command",
			Request{Skill: "plain", AllowedTools: []string{"Read"}, Tool: "Bash", Input: bash("git status")},
			`allowed-tools of skill "plain"`,
			nil,
			[]string{`add Bash(git:*) to the skill's allowed-tools`},
			"cannot be overridden"},
		{"declared empty",
			Request{Skill: "plain", AllowedTools: []string{}, Tool: "skills.run_script"},
			`allowed-tools of skill "plain"`,
			[]string{`declares an empty allowed-tools`},
			[]string{`add Bash or skills.run_script`},
			"cannot be overridden"},
		{"a policy rule",
			Request{Skill: "guarded-secret", AllowedTools: []string{"Bash"}, Tool: "skills.run_script"},
			`policy "lockdown" (testdata/rules.hcl:23)`,
			[]string{`"skills.run_script" in deny`},
			[]string{`cannot be overridden`, `change policy "lockdown" (testdata/rules.hcl:23)`},
			"add "},
		{"no rule allows",
			Request{Skill: "plain", Tool: "skills.run_code", Input: []byte(`{"language": "shell"}`)},
			RuleDefaultDeny,
			[]string{`no policy rule allows`},
			[]string{`add "skills.run_code(shell)" to the tools of a policy block whose skills match "plain"`},
			"cannot be overridden"},
		{"network",
			Request{Skill: "plain", Tool: NetworkTool},
			RuleNetworkDefault,
			[]string{`network access is off`},
			[]string{`set network = true`},
			"cannot be overridden"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := c.Decide(tc.req)
			if d.Effect != EffectDeny || d.Rule != tc.rule {
				t.Fatalf("%+v, want deny by %s", d, tc.rule)
			}
			for _, s := range tc.reason {
				if !strings.Contains(d.Reason, s) {
					t.Errorf("reason %q lacks %q", d.Reason, s)
				}
			}
			for _, s := range tc.fix {
				if !strings.Contains(d.Fix, s) {
					t.Errorf("fix %q lacks %q", d.Fix, s)
				}
			}
			if tc.noFixContain != "" && strings.Contains(d.Fix, tc.noFixContain) {
				t.Errorf("fix %q says %q: wrong cause", d.Fix, tc.noFixContain)
			}
			if !strings.HasPrefix(d.Why(), d.Reason+"; ") || !strings.HasSuffix(d.Why(), d.Fix) {
				t.Errorf("Why() = %q", d.Why())
			}
		})
	}
}

// FuzzExplainAllowedTools: whatever a skill declares, every entry is
// explained once, in order, and nothing but the mapping's own tools is
// ever covered; Decide never panics on it.
func FuzzExplainAllowedTools(f *testing.F) {
	for _, s := range []string{"Read Write Edit Bash", "Bash(python:*) Bash(./scripts/*)", "mcp__skillbox__skills_run_script skills_read",
		"Bash( Read(", "skills.* *", "shell Glob grep", "Bash(git status:*), WebFetch(domain:x.org)"} {
		f.Add(s, "skills.run_script", `{"command": "git status"}`)
	}
	c := Default()
	f.Fuzz(func(t *testing.T, list, tool, input string) {
		entries := strings.Fields(list)
		got := ExplainAllowedTools(entries)
		if len(got) != len(entries) {
			t.Fatalf("%d explanations for %d entries", len(got), len(entries))
		}
		for i, e := range got {
			if e.Entry != entries[i] || e.Kind == "" || (e.Note == "" && utf8.ValidString(e.Entry)) {
				t.Fatalf("entry %d: %+v", i, e)
			}
			for _, cv := range e.Covers {
				name, _, _ := strings.Cut(cv, "(")
				if !slices.Contains(skillboxTools, name) {
					t.Fatalf("%q covers %q", e.Entry, cv)
				}
			}
			if (e.Kind == EntryOther || e.Kind == EntryInvalid || e.Kind == EntryHostWrite) && len(e.Covers) > 0 {
				t.Fatalf("%q (%s) covers %q", e.Entry, e.Kind, e.Covers)
			}
		}
		for _, mode := range []ToolMode{ToolModeRestrict, ToolModePreapprove} {
			cc := *c
			cc.Daemon.ToolMode = mode
			d := cc.Decide(Request{Skill: "s", AllowedTools: entries, Tool: tool, Input: []byte(input)})
			if d.Effect == EffectDeny && d.Fix == "" && d.Rule != RuleBadRequest {
				t.Fatalf("a deny without a fix: %+v", d)
			}
		}
	})
}
