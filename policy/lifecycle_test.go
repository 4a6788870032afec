package policy

import (
	"strings"
	"testing"
	"time"
)

// skills.render_command is denied unless an operator opts in: neither the
// built-in rule nor the shipped example lists it.
func TestRenderCommandDeniedByDefault(t *testing.T) {
	for name, c := range map[string]*Config{"built-in": Default(), "example": mustLoad(t, "../examples/skillbox.hcl")} {
		t.Run(name, func(t *testing.T) {
			d := c.Decide(Request{Skill: "any", Tool: "skills.render_command", Input: bash("date")})
			if d.Effect != EffectDeny {
				t.Errorf("render_command under the %s config: %+v", name, d)
			}
		})
	}
}

func TestRenderCommandMatchedLikeBash(t *testing.T) {
	c, err := Parse([]byte(`
policy "r" {
  skills  = ["notes"]
  tools   = ["skills.render_command(git log:*)", "skills.render_command(date)"]
  confirm = ["skills.render_command(date)"]
}
`), "r.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd  string
		want Effect
	}{
		{"git log --oneline -3", EffectAllow},
		{"date", EffectConfirm},
		{"git log; cat /etc/shadow", EffectDeny},
		{"rm -rf /", EffectDeny},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			if d := c.Decide(Request{Skill: "notes", Tool: "skills.render_command", Input: bash(tc.cmd)}); d.Effect != tc.want {
				t.Errorf("got %+v, want %s", d, tc.want)
			}
		})
	}
}

func TestLifecycleKeys(t *testing.T) {
	c, err := Parse([]byte(`
skills {
  catalog_budget_tokens = 500
  lock_file = "/tmp/x.lock"
}
policy "pinned" {
  skills       = ["*"]
  tools        = ["skills.read"]
  require_lock = true
  hook_timeout = "30s"
}
policy "strict-hooks" {
  skills       = ["sec-*"]
  hook_failure = "confirm"
  hook_timeout = "2s"
}
policy "loose" {
  skills       = ["dev-*"]
  require_lock = false
  hook_failure = "ignore"
}
agent "reviewer" {
  uses_skills = ["code-review", "lint"]
}
`), "l.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.Skills.CatalogBudgetTokens != 500 || c.Skills.LockFile != "/tmp/x.lock" {
		t.Errorf("skills block: %+v", c.Skills)
	}
	if a := c.Agents["reviewer"]; a == nil || strings.Join(a.UsesSkills, ",") != "code-review,lint" {
		t.Errorf("agent: %+v", c.Agents)
	}
	tests := []struct {
		skill       string
		lock        bool
		failure     string
		timeout     time.Duration
		failureRule string
	}{
		{"plain", true, HookFailureDeny, 10 * time.Second, ""},
		{"sec-x", true, HookFailureConfirm, 2 * time.Second, "strict-hooks"},
		{"dev-x", false, HookFailureIgnore, 10 * time.Second, "loose"},
	}
	for _, tt := range tests {
		t.Run(tt.skill, func(t *testing.T) {
			if lk := c.For(tt.skill).Lock; lk.Value != tt.lock || lk.Rule == "" {
				t.Errorf("Lock = %v (%s), want %v", lk.Value, lk.Rule, tt.lock)
			}
			hp := c.For(tt.skill).Hooks
			if hp.Failure != tt.failure || hp.Timeout != tt.timeout || ruleName(hp.Rule) != ruleName(policyRule(tt.failureRule)) {
				t.Errorf("Hooks = %+v, want %s %s by %q", hp, tt.failure, tt.timeout, tt.failureRule)
			}
		})
	}
}

func policyRule(name string) string {
	if name == "" {
		return ""
	}
	return `policy "` + name + `"`
}

func TestLifecycleKeyErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`policy "p" {
  skills = ["*"]
  hook_failure = "maybe"
}`, "hook_failure"},
		{`agent "a" {}`, "uses_skills"},
		{`agent "a" {
  uses_skills = []
}`, "uses_skills"},
		{`agent "a" {
  uses_skills = ["Not A Name"]
}`, "not a skill name"},
	} {
		_, err := Parse([]byte(tc.src), "bad.hcl")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.hcl:") {
			t.Errorf("%s: error %v, want one naming %q with file:line", tc.src, err, tc.want)
		}
	}
}
