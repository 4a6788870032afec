package policy

import (
	"strings"
	"testing"
	"time"
)

const isolationHCL = `
policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
}
policy "notebooks" {
  skills    = ["nb-*"]
  isolation = "session"
}
policy "also-session" {
  skills    = ["nb-*", "server"]
  isolation = "session"
}
policy "strict" {
  skills    = ["nb-secret"]
  isolation = "run"
}
`

func TestIsolationFor(t *testing.T) {
	c, err := Parse([]byte(isolationHCL), "iso.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		skill string
		want  Isolation
		rule  string
	}{
		{"no rule sets it", "pdf", IsolationRun, RuleIsolationDefault},
		{"run_code without skills", "", IsolationRun, RuleIsolationDefault},
		{"session, first rule by name", "nb-plot", IsolationSession, `policy "also-session" (iso.hcl:10)`},
		{"one rule", "server", IsolationSession, `policy "also-session" (iso.hcl:10)`},
		{"run beats session", "nb-secret", IsolationRun, `policy "strict" (iso.hcl:14)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, rule := c.IsolationFor(tc.skill)
			if got != tc.want || rule != tc.rule {
				t.Errorf("IsolationFor(%q) = %q, %q; want %q, %q", tc.skill, got, rule, tc.want, tc.rule)
			}
		})
	}
}

func TestForSkillsIsolation(t *testing.T) {
	c, err := Parse([]byte(isolationHCL), "iso.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		skills []string
		want   Isolation
		rule   string
	}{
		{"none", nil, IsolationRun, RuleIsolationDefault},
		{"all session", []string{"nb-plot", "server"}, IsolationSession, `policy "also-session" (iso.hcl:10)`},
		{"one fresh", []string{"nb-plot", "pdf"}, IsolationRun, RuleIsolationDefault},
		{"one strict", []string{"server", "nb-secret"}, IsolationRun, `policy "strict" (iso.hcl:14)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iso := c.ForSkills(tc.skills...).Isolation
			if got, rule := iso.Value, iso.Rule; got != tc.want || rule != tc.rule {
				t.Errorf("ForSkills(%q).Isolation = %q, %q; want %q, %q", tc.skills, got, rule, tc.want, tc.rule)
			}
		})
	}
}

func TestSessionsBlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want SessionConfig
		err  string // a substring of the error; "" for none
	}{
		{name: "defaults", src: ``, want: DefaultSessionConfig},
		{name: "all set", src: `sessions {
  idle_timeout      = "2m"
  checkpoint_budget = "1GiB"
  checkpoint_budget_per_session = "256MiB"
  checkpoint_budget_per_uid     = "512MiB"
  checkpoint_disk_percent       = 20
  max_sandboxes     = 3
  background_runs   = 0
}`, want: SessionConfig{IdleTimeout: 2 * time.Minute, CheckpointBudget: 1 << 30, CheckpointBudgetPerSession: 256 << 20, CheckpointBudgetPerUID: 512 << 20,
			CheckpointDiskPercent: 20, MaxSandboxes: 3, BackgroundRuns: 0, Pos: Pos{File: "s.hcl", Line: 1}}},
		{name: "no disk share", src: `sessions { checkpoint_disk_percent = 0 }`,
			want: SessionConfig{IdleTimeout: 10 * time.Minute, CheckpointBudget: 4 << 30, CheckpointBudgetPerSession: 2 << 30, CheckpointBudgetPerUID: 2 << 30, MaxSandboxes: 16, BackgroundRuns: 8, Pos: Pos{File: "s.hcl", Line: 1}}},
		{name: "disk share over 100", src: "sessions {\n  checkpoint_disk_percent = 150\n}", err: `s.hcl:2: sessions.checkpoint_disk_percent: is 150, but it is a percent`},
		{name: "bad per-uid size", src: `sessions { checkpoint_budget_per_uid = "0" }`, err: `sessions.checkpoint_budget_per_uid: must be greater than 0 bytes`},
		{name: "never checkpoint", src: `sessions { idle_timeout = "0" }`,
			want: SessionConfig{IdleTimeout: 0, CheckpointBudget: 4 << 30, CheckpointBudgetPerSession: 2 << 30, CheckpointBudgetPerUID: 2 << 30, CheckpointDiskPercent: 50, MaxSandboxes: 16, BackgroundRuns: 8, Pos: Pos{File: "s.hcl", Line: 1}}},
		{name: "never checkpoint, number", src: `sessions { idle_timeout = 0 }`,
			want: SessionConfig{IdleTimeout: 0, CheckpointBudget: 4 << 30, CheckpointBudgetPerSession: 2 << 30, CheckpointBudgetPerUID: 2 << 30, CheckpointDiskPercent: 50, MaxSandboxes: 16, BackgroundRuns: 8, Pos: Pos{File: "s.hcl", Line: 1}}},
		{name: "bad duration", src: `sessions { idle_timeout = "soon" }`, err: `sessions.idle_timeout: invalid duration "soon"`},
		{name: "negative duration", src: `sessions { idle_timeout = "-1m" }`, err: `sessions.idle_timeout: must be greater than 0`},
		{name: "bad size", src: `sessions { checkpoint_budget = "4 lots" }`, err: `sessions.checkpoint_budget: invalid size`},
		{name: "no sandboxes", src: `sessions { max_sandboxes = 0 }`, err: `sessions.max_sandboxes: must be at least 1, not 0`},
		{name: "unknown key", src: `sessions { idle = "1m" }`, err: `Unsupported argument`},
		{name: "twice", src: "sessions {}\nsessions {}", err: `sessions: declared twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.src), "s.hcl")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse = %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Sessions != tc.want {
				t.Errorf("Sessions = %+v, want %+v", c.Sessions, tc.want)
			}
		})
	}
}

func TestIsolationRuleErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, err string
	}{
		{"unknown value", `policy "nb" {
  skills    = ["*"]
  isolation = "forever"
}`, `iso.hcl:3: policy "nb".isolation: unknown value "forever": choose one of run, session`},
		{"not a string", `policy "nb" {
  skills    = ["*"]
  isolation = true
}`, `policy "nb".isolation: must be a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "iso.hcl")
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Parse = %v, want an error with %q", err, tc.err)
			}
		})
	}
}
