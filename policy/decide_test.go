package policy

import (
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// ruleName drops the " (file:line)" so decisions compare across files.
func ruleName(s string) string {
	if i := strings.Index(s, " ("); i >= 0 {
		return s[:i]
	}
	return s
}

func bash(cmd string) []byte { return []byte(`{"command": ` + quote(cmd) + `}`) }

func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

type decideCase struct {
	name    string
	req     Request
	effect  Effect
	rule    string // without position
	inWhy   string // optional substring of Reason
	preappr bool   // run with tool_mode = "preapprove"
}

var policyCases = []decideCase{
	{name: "allowed by the catch-all", req: Request{Skill: "plain", Tool: "skills.run_script"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "git prefix", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git status")}, effect: EffectAllow, rule: `policy "base"`},
	{name: "git alone", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git")}, effect: EffectAllow, rule: `policy "base"`},
	{name: "git extra spaces", req: Request{Skill: "plain", Tool: "Bash", Input: bash("  git   log  -1 ")}, effect: EffectAllow, rule: `policy "base"`},
	{name: "git fd dup", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git log 2>&1")}, effect: EffectAllow, rule: `policy "base"`},
	{name: "git to dev null", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git log > /dev/null")}, effect: EffectAllow, rule: `policy "base"`},
	{name: "git pipe git", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git log | git status")}, effect: EffectAllow, rule: `policy "base"`},
	{name: "gitk is not git", req: Request{Skill: "plain", Tool: "Bash", Input: bash("gitk")}, effect: EffectDeny, rule: RuleDefaultDeny, inWhy: "no policy rule allows"},
	{name: "chained rm", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git status && rm -rf /")}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "semicolon rm", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git status; rm -rf /")}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "quoted semicolon ok", req: Request{Skill: "plain", Tool: "Bash", Input: bash(`git commit -m "a; rm -rf /"`)}, effect: EffectAllow, rule: `policy "base"`},
	{name: "substitution", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git log $(rm -rf /)")}, effect: EffectDeny, rule: `policy "base"`},
	{name: "backticks", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git log `id`")}, effect: EffectDeny},
	{name: "redirect to file", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git log > ~/.bashrc")}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "deny git push", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git push origin main")}, effect: EffectDeny, rule: `policy "base"`, inWhy: "git push:*"},
	{name: "deny push hidden in chain", req: Request{Skill: "plain", Tool: "Bash", Input: bash("git status && git push")}, effect: EffectDeny, rule: `policy "base"`},
	{name: "Bash without input", req: Request{Skill: "plain", Tool: "Bash"}, effect: EffectDeny, rule: `policy "base"`},
	{name: "not listed", req: Request{Skill: "plain", Tool: "Write"}, effect: EffectDeny, rule: RuleDefaultDeny, inWhy: `policy "base"`},
	{name: "mcp server shorthand", req: Request{Skill: "plain", Tool: "mcp__github__create_issue"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "other mcp server", req: Request{Skill: "plain", Tool: "mcp__gitlab__create_issue"}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "mcp glob", req: Request{Skill: "js-app", Tool: "mcp__docs__search"}, effect: EffectAllow, rule: `policy "js"`},
	{name: "npm multiword prefix", req: Request{Skill: "js-app", Tool: "Bash", Input: bash("npm run test -- --watch")}, effect: EffectAllow, rule: `policy "js"`},
	{name: "npm prefix word boundary", req: Request{Skill: "js-app", Tool: "Bash", Input: bash("npm run testevil")}, effect: EffectDeny},
	{name: "npm exact", req: Request{Skill: "js-app", Tool: "Bash", Input: bash("npm ci")}, effect: EffectAllow, rule: `policy "js"`},
	{name: "npm exact only", req: Request{Skill: "js-app", Tool: "Bash", Input: bash("npm ci --ignore-scripts=false")}, effect: EffectDeny},
	{name: "run_code: language allowed", req: Request{Skill: "plain", Tool: "skills.run_code", Input: []byte(`{"language": "python"}`)}, effect: EffectAllow, rule: `policy "base"`},
	{name: "run_code: other language", req: Request{Skill: "plain", Tool: "skills.run_code", Input: []byte(`{"language": "shell"}`)}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "run_code: no language", req: Request{Skill: "plain", Tool: "skills.run_code"}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "run_code: confirm", req: Request{Skill: "guarded-x", Tool: "skills.run_code", Input: []byte(`{"language": "python"}`)}, effect: EffectConfirm, rule: `policy "guarded"`},
	{name: "run_code: deny by language", req: Request{Skill: "guarded-secret", Tool: "skills.run_code", Input: []byte(`{"language": "shell"}`)}, effect: EffectDeny, rule: `policy "lockdown"`},
	{name: "run_code: deny is per language", req: Request{Skill: "guarded-secret", Tool: "skills.run_code", Input: []byte(`{"language": "python"}`)}, effect: EffectConfirm, rule: `policy "guarded"`},
	{name: "confirm beats allow", req: Request{Skill: "guarded-x", Tool: "skills.run_script"}, effect: EffectConfirm, rule: `policy "guarded"`},
	{name: "confirm on command", req: Request{Skill: "guarded-x", Tool: "Bash", Input: bash("git commit -m x")}, effect: EffectConfirm, rule: `policy "guarded"`},
	{name: "deny beats confirm", req: Request{Skill: "guarded-x", Tool: "Bash", Input: bash("git commit -m x && git push")}, effect: EffectDeny, rule: `policy "base"`},
	{name: "deny beats confirm beats allow", req: Request{Skill: "guarded-secret", Tool: "skills.run_script"}, effect: EffectDeny, rule: `policy "lockdown"`},
	{name: "rule adds a tool", req: Request{Skill: "guarded-secret", Tool: "Write"}, effect: EffectAllow, rule: `policy "lockdown"`},
	{name: "webfetch subdomain", req: Request{Skill: "web-a", Tool: "WebFetch", Input: []byte(`{"url": "https://api.example.com/v1"}`)}, effect: EffectAllow, rule: `policy "web"`},
	{name: "webfetch apex", req: Request{Skill: "web-a", Tool: "WebFetch", Input: []byte(`{"url": "https://EXAMPLE.com"}`)}, effect: EffectAllow, rule: `policy "web"`},
	{name: "webfetch other", req: Request{Skill: "web-a", Tool: "WebFetch", Input: []byte(`{"url": "https://example.com.evil.org/"}`)}, effect: EffectDeny},
	{name: "network needs confirm", req: Request{Skill: "web-a", Tool: NetworkTool}, effect: EffectConfirm, rule: `policy "web"`},
	{name: "network false wins", req: Request{Skill: "web-offline", Tool: NetworkTool}, effect: EffectDeny, rule: `policy "web-offline"`},
	{name: "network off by default", req: Request{Skill: "plain", Tool: NetworkTool}, effect: EffectDeny, rule: RuleNetworkDefault},
	{name: "bad input", req: Request{Skill: "plain", Tool: "Bash", Input: []byte(`["git"]`)}, effect: EffectDeny, rule: RuleBadRequest},
	{name: "bad tool name", req: Request{Skill: "plain", Tool: "Bash(git status)"}, effect: EffectDeny, rule: RuleBadRequest},
	{name: "empty tool", req: Request{Skill: "plain"}, effect: EffectDeny, rule: RuleBadRequest},

	// A skill's allowed-tools, restrict mode (the default).
	{name: "restrict: inside the list", req: Request{Skill: "plain", AllowedTools: []string{"Read", "Bash(git:*)"}, Tool: "Bash", Input: bash("git diff")}, effect: EffectAllow, rule: `policy "base"`},
	{name: "restrict: skillbox tool outside", req: Request{Skill: "plain", AllowedTools: []string{"Read", "WebFetch"}, Tool: "skills.run_script"}, effect: EffectDeny, rule: `allowed-tools of skill "plain"`, inWhy: `which lists "Read WebFetch" (Read covers skills.read)`},
	{name: "restrict: host tool outside", req: Request{Skill: "plain", AllowedTools: []string{"skills.run_script"}, Tool: "Read"}, effect: EffectDeny, rule: `allowed-tools of skill "plain"`},
	{name: "restrict: input outside the list", req: Request{Skill: "plain", AllowedTools: []string{"Bash(git log:*)"}, Tool: "Bash", Input: bash("git status")}, effect: EffectDeny, rule: `allowed-tools of skill "plain"`},
	{name: "restrict: cannot widen", req: Request{Skill: "plain", AllowedTools: []string{"Write", "Bash"}, Tool: "Write"}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "restrict: cannot widen input", req: Request{Skill: "plain", AllowedTools: []string{"Bash"}, Tool: "Bash", Input: bash("rm -rf /")}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "restrict: policy deny stays", req: Request{Skill: "plain", AllowedTools: []string{"Bash(git:*)"}, Tool: "Bash", Input: bash("git push")}, effect: EffectDeny, rule: `policy "base"`},
	{name: "restrict: declared empty", req: Request{Skill: "plain", AllowedTools: []string{}, Tool: "skills.read"}, effect: EffectDeny, rule: `allowed-tools of skill "plain"`},
	{name: "restrict: confirm stays", req: Request{Skill: "guarded-x", AllowedTools: []string{"skills.run_script"}, Tool: "skills.run_script"}, effect: EffectConfirm, rule: `policy "guarded"`},
	{name: "restrict: source named", req: Request{Skill: "plain", AllowedTools: []string{"Read"}, Source: "/s/plain/SKILL.md:4", Tool: "Write"}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "restrict: source named on its deny", req: Request{Skill: "plain", AllowedTools: []string{"Read"}, Source: "/s/plain/SKILL.md:4", Tool: "skills.run_script"}, effect: EffectDeny, rule: `allowed-tools of skill "plain" (/s/plain/SKILL.md:4)`},

	// Host tool names in allowed-tools: the host's shell
	// covers the skill's own scripts and code, Read covers skills.read,
	// Write and Edit cover nothing and refuse nothing.
	{name: "hosts: Read Write Edit Bash runs scripts", req: Request{Skill: "plain", AllowedTools: []string{"Read", "Write", "Edit", "Bash"}, Tool: "skills.run_script"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: Read Write Edit Bash runs code", req: Request{Skill: "plain", AllowedTools: []string{"Read", "Write", "Edit", "Bash"}, Tool: "skills.run_code", Input: []byte(`{"language": "python"}`)}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: Read Write Edit Bash reads", req: Request{Skill: "plain", AllowedTools: []string{"Read", "Write", "Edit", "Bash"}, Tool: "skills.read"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: Bash(python:*) runs scripts", req: Request{Skill: "plain", AllowedTools: []string{"Bash(python:*)"}, Tool: "skills.run_script", Input: []byte(`{"path": "scripts/x.py"}`)}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: Bash(./scripts/*) runs scripts", req: Request{Skill: "plain", AllowedTools: []string{"Bash(./scripts/*)"}, Tool: "skills.run_script"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: Bash(git:*) runs scripts", req: Request{Skill: "plain", AllowedTools: []string{"Bash(git:*)"}, Tool: "skills.run_script"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: lowercase shell", req: Request{Skill: "plain", AllowedTools: []string{"shell"}, Tool: "skills.run_script"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: Glob reads", req: Request{Skill: "plain", AllowedTools: []string{"Glob"}, Tool: "skills.read"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: MCP name", req: Request{Skill: "plain", AllowedTools: []string{"skills_run_script"}, Tool: "skills.run_script"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: prefixed MCP name", req: Request{Skill: "plain", AllowedTools: []string{"mcp__skillbox__skills_run_script"}, Tool: "skills.run_script"}, effect: EffectAllow, rule: `policy "base"`},
	{name: "hosts: Read alone does not run", req: Request{Skill: "plain", AllowedTools: []string{"Read"}, Tool: "skills.run_script"}, effect: EffectDeny, rule: `allowed-tools of skill "plain"`,
		inWhy: `which lists "Read" (Read covers skills.read)`},
	{name: "hosts: Write Edit do not run", req: Request{Skill: "plain", AllowedTools: []string{"Write", "Edit", "WebFetch", "mcp__x__y"}, Tool: "skills.run_code", Input: []byte(`{"language": "python"}`)}, effect: EffectDeny, rule: `allowed-tools of skill "plain"`},
	{name: "hosts: shell keeps narrowing host Bash", req: Request{Skill: "plain", AllowedTools: []string{"Bash(python:*)"}, Tool: "Bash", Input: bash("git status")}, effect: EffectDeny, rule: `allowed-tools of skill "plain"`},
	{name: "hosts: Bash maps, policy deny stays", req: Request{Skill: "guarded-secret", AllowedTools: []string{"Bash"}, Tool: "skills.run_script"}, effect: EffectDeny, rule: `policy "lockdown"`, inWhy: "denied"},
	{name: "hosts: Bash maps, policy confirm stays", req: Request{Skill: "guarded-x", AllowedTools: []string{"Bash"}, Tool: "skills.run_script"}, effect: EffectConfirm, rule: `policy "guarded"`},
	{name: "hosts: Bash maps, policy language stays", req: Request{Skill: "plain", AllowedTools: []string{"Bash"}, Tool: "skills.run_code", Input: []byte(`{"language": "shell"}`)}, effect: EffectDeny, rule: RuleDefaultDeny},
	{name: "hosts: invalid entry covers nothing", req: Request{Skill: "plain", AllowedTools: []string{"Bash("}, Tool: "skills.run_script"}, effect: EffectDeny, rule: `allowed-tools of skill "plain"`},

	// preapprove mode.
	// A skill's own text only narrows policy: listing a tool
	// never waives the confirmation a policy asks for.
	{preappr: true, name: "preapprove: never skips a policy confirmation", req: Request{Skill: "guarded-x", AllowedTools: []string{"skills.run_script"}, Tool: "skills.run_script"}, effect: EffectConfirm, rule: `policy "guarded"`, inWhy: "cannot waive"},
	{preappr: true, name: "preapprove: never skips a command's confirmation", req: Request{Skill: "guarded-x", AllowedTools: []string{"Bash(git:*)"}, Tool: "Bash", Input: bash("git commit -m x")}, effect: EffectConfirm, rule: `policy "guarded"`},
	{preappr: true, name: "preapprove: listed and allowed", req: Request{Skill: "plain", AllowedTools: []string{"Bash(git:*)"}, Tool: "Bash", Input: bash("git status")}, effect: EffectAllow, rule: `policy "base"`},
	{preappr: true, name: "preapprove: others keep confirm", req: Request{Skill: "guarded-x", AllowedTools: []string{"Read"}, Tool: "skills.run_script"}, effect: EffectConfirm, rule: `policy "guarded"`},
	{preappr: true, name: "preapprove: others keep allow", req: Request{Skill: "plain", AllowedTools: []string{"Read"}, Tool: "Bash", Input: bash("git status")}, effect: EffectAllow, rule: `policy "base"`},
	{preappr: true, name: "preapprove: never past explicit deny", req: Request{Skill: "guarded-secret", AllowedTools: []string{"skills.run_script"}, Tool: "skills.run_script"}, effect: EffectDeny, rule: `policy "lockdown"`},
	{preappr: true, name: "preapprove: never past default deny", req: Request{Skill: "plain", AllowedTools: []string{"Write"}, Tool: "Write"}, effect: EffectDeny, rule: RuleDefaultDeny},
	{preappr: true, name: "preapprove: Read alone keeps the policy's allow", req: Request{Skill: "plain", AllowedTools: []string{"Read"}, Tool: "skills.run_script"}, effect: EffectAllow, rule: `policy "base"`},
	{preappr: true, name: "preapprove: Bash cannot waive a confirmation", req: Request{Skill: "guarded-x", AllowedTools: []string{"Bash"}, Tool: "skills.run_script"}, effect: EffectConfirm, rule: `policy "guarded"`, inWhy: `"Bash" in the skill's allowed-tools`},
	{preappr: true, name: "preapprove: list does not cover input", req: Request{Skill: "guarded-x", AllowedTools: []string{"Bash(git log:*)"}, Tool: "Bash", Input: bash("git commit -m x")}, effect: EffectConfirm, rule: `policy "guarded"`},
}

func runCases(t *testing.T, c *Config, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc := *c
			cc.Daemon.ToolMode = ToolModeRestrict
			if tc.preappr {
				cc.Daemon.ToolMode = ToolModePreapprove
			}
			d := cc.Decide(tc.req)
			if d.Effect != tc.effect {
				t.Errorf("effect %s, want %s (%+v)", d.Effect, tc.effect, d)
			}
			if tc.rule != "" && ruleName(d.Rule) != tc.rule && d.Rule != tc.rule {
				t.Errorf("rule %q, want %q (%s)", d.Rule, tc.rule, d.Reason)
			}
			if tc.inWhy != "" && !strings.Contains(d.Reason, tc.inWhy) {
				t.Errorf("reason %q lacks %q", d.Reason, tc.inWhy)
			}
			if d.Rule == "" || d.Reason == "" {
				t.Errorf("decision does not explain itself: %+v", d)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	runCases(t, mustLoad(t, "testdata/rules.hcl"), policyCases)
}

func TestDecisionNamesFileAndLine(t *testing.T) {
	c := mustLoad(t, "testdata/rules.hcl")
	d := c.Decide(Request{Skill: "guarded-x", Tool: "skills.run_script"})
	if d.Rule != `policy "guarded" (testdata/rules.hcl:14)` {
		t.Errorf("rule %q", d.Rule)
	}
}

// Shuffling the blocks of the file must not change any decision, the rule
// each names, limits or network.
func TestOrderIndependence(t *testing.T) {
	src, err := os.ReadFile("testdata/rules.hcl")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(strings.TrimSpace(string(src)), "\n\n")
	skills := []string{"plain", "guarded-x", "guarded-secret", "guarded-web", "evil", "web-a", "web-offline", "js-app"}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 25; i++ {
		rng.Shuffle(len(blocks), func(a, b int) { blocks[a], blocks[b] = blocks[b], blocks[a] })
		c, err := Parse([]byte(strings.Join(blocks, "\n\n")), "shuffled.hcl")
		if err != nil {
			t.Fatal(err)
		}
		runCases(t, c, policyCases)
		ref := mustLoad(t, "testdata/rules.hcl")
		for _, s := range skills {
			l1, r1 := ref.LimitsFor(s)
			l2, r2 := c.LimitsFor(s)
			if l1 != l2 || len(r1) != len(r2) {
				t.Errorf("shuffle %d: LimitsFor(%s) = %+v %v, want %+v %v", i, s, l2, r2, l1, r1)
			}
			for j := range r1 {
				if ruleName(r1[j]) != ruleName(r2[j]) {
					t.Errorf("shuffle %d: LimitsFor(%s) rules %v, want %v", i, s, r2, r1)
				}
			}
			n1, w1 := ref.NetworkFor(s)
			n2, w2 := c.NetworkFor(s)
			if n1 != n2 || ruleName(w1) != ruleName(w2) {
				t.Errorf("shuffle %d: NetworkFor(%s) = %v %s, want %v %s", i, s, n2, w2, n1, w1)
			}
		}
	}
}

func TestLimitsStrictest(t *testing.T) {
	c := mustLoad(t, "testdata/rules.hcl")
	base := runtime.DefaultLimits
	base.Timeout, base.MemoryBytes = time.Minute, 1<<30
	cases := []struct {
		skill string
		want  func(l *runtime.Limits)
		rules []string
	}{
		{"plain", func(*runtime.Limits) {}, []string{"limits"}},
		{"guarded-x", func(l *runtime.Limits) { l.MemoryBytes = 256 << 20 }, []string{"limits", `policy "guarded"`}},
		{"guarded-secret", func(l *runtime.Limits) {
			l.MemoryBytes, l.Timeout, l.Pids, l.OutputFileBytes = 256<<20, 10*time.Second, 16, 1<<20
		},
			[]string{"limits", `policy "guarded"`, `policy "lockdown"`}},
		// "generous" asks for more; it cannot raise anything.
		{"evil", func(l *runtime.Limits) {
			l.MemoryBytes, l.Timeout, l.Pids, l.OutputFileBytes = 512<<20, 10*time.Second, 16, 1<<20
		},
			[]string{"limits", `policy "lockdown"`}},
	}
	for _, tc := range cases {
		t.Run(tc.skill, func(t *testing.T) {
			want := base
			tc.want(&want)
			got, rules := c.LimitsFor(tc.skill)
			if got != want {
				t.Errorf("limits %+v\nwant   %+v", got, want)
			}
			var names []string
			for _, r := range rules {
				names = append(names, ruleName(r))
			}
			if strings.Join(names, "|") != strings.Join(tc.rules, "|") {
				t.Errorf("rules %v, want %v", rules, tc.rules)
			}
		})
	}
}

func TestTighten(t *testing.T) {
	base := runtime.DefaultLimits
	got := Tighten(base, runtime.Limits{Timeout: time.Second, MemoryBytes: 1 << 40})
	if got.Timeout != time.Second || got.MemoryBytes != base.MemoryBytes || got.Pids != base.Pids {
		t.Errorf("Tighten: %+v", got)
	}
}

func TestNetworkFor(t *testing.T) {
	c := mustLoad(t, "testdata/rules.hcl")
	for _, tc := range []struct {
		skill string
		ok    bool
		rule  string
	}{
		{"web-a", true, `policy "web"`},
		{"guarded-web", true, `policy "web"`},
		{"web-offline", false, `policy "web-offline"`},
		{"plain", false, RuleNetworkDefault},
	} {
		t.Run(tc.skill, func(t *testing.T) {
			ok, rule := c.NetworkFor(tc.skill)
			if ok != tc.ok || ruleName(rule) != ruleName(tc.rule) {
				t.Errorf("got %v %q, want %v %q", ok, rule, tc.ok, tc.rule)
			}
		})
	}
}

func TestStrictest(t *testing.T) {
	a := Decision{Effect: EffectAllow, Rule: "a"}
	cf := Decision{Effect: EffectConfirm, Rule: "c"}
	dn := Decision{Effect: EffectDeny, Rule: "d"}
	if Strictest(a, cf).Rule != "c" || Strictest(cf, dn, a).Rule != "d" || Strictest(a).Rule != "a" || Strictest().Effect != EffectDeny {
		t.Error("Strictest")
	}
}

func TestIsApprover(t *testing.T) {
	c, err := Parse([]byte(`daemon { approvers = ["alice", "1001"] }`), "a.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uid  uint32
		name string
		want bool
	}{
		{1000, "alice", true},
		{1001, "bob", true},
		{1002, "bob", false},
		{0, "root", false},
	} {
		if got := c.IsApprover(tc.uid, tc.name); got != tc.want {
			t.Errorf("IsApprover(%d, %q) = %v", tc.uid, tc.name, got)
		}
	}
	// Default approvers are root; the name is looked up when not given.
	if !Default().IsApprover(0, "") || Default().IsApprover(12345, "") {
		t.Error("default approvers")
	}
}

func TestScriptDirsFor(t *testing.T) {
	c := mustLoad(t, "testdata/rules.hcl")
	for _, tc := range []struct {
		skill string
		dirs  []string // nil: any file
		rules []string
	}{
		{"plain", nil, nil},
		{"guarded-x", []string{"core", "scripts"}, []string{`policy "guarded"`}},
		// guarded ∩ lockdown: the narrower directories inside both.
		{"guarded-secret", []string{"core/gif", "scripts/tools"}, []string{`policy "guarded"`, `policy "lockdown"`}},
		// lockdown ∩ generous share nothing: no script may run.
		{"evil", []string{}, []string{`policy "generous"`, `policy "lockdown"`}},
	} {
		t.Run(tc.skill, func(t *testing.T) {
			dirs, rule := c.ScriptDirsFor(tc.skill)
			if (dirs == nil) != (tc.dirs == nil) || strings.Join(dirs, ",") != strings.Join(tc.dirs, ",") {
				t.Errorf("dirs %q, want %q", dirs, tc.dirs)
			}
			if tc.rules == nil {
				if rule != RuleScriptDirsDefault {
					t.Errorf("rule %q", rule)
				}
				return
			}
			for _, r := range tc.rules {
				if !strings.Contains(rule, r+" (testdata/rules.hcl:") {
					t.Errorf("rule %q does not name %s with its line", rule, r)
				}
			}
		})
	}
}

func TestScriptInDirs(t *testing.T) {
	for _, tc := range []struct {
		script string
		dirs   []string
		want   bool
	}{
		{"anything/at/all.py", nil, true},
		{"run.py", nil, true},
		{"scripts/x.py", []string{"scripts"}, true},
		{"scripts/sub/x.py", []string{"core", "scripts"}, true},
		{"scriptsx/x.py", []string{"scripts"}, false},
		{"scripts", []string{"scripts"}, false},
		{"run.py", []string{"scripts"}, false},
		{"scripts/x.py", []string{}, false},
		{"core/gif/make.py", []string{"core/gif"}, true},
		{"core/other.py", []string{"core/gif"}, false},
	} {
		if got := ScriptInDirs(tc.script, tc.dirs); got != tc.want {
			t.Errorf("ScriptInDirs(%q, %q) = %v", tc.script, tc.dirs, got)
		}
	}
}
