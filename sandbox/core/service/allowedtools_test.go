package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
)

// A skill's allowed-tools in a host's terms: the host's shell
// lets the skill run its scripts under the default tool_mode, a list
// without it is refused with the list and the fix, and a policy deny still
// says it cannot be overridden.
func TestAllowedToolsRefusals(t *testing.T) {
	script := map[string]string{"scripts/run.sh": "echo hi\n"}
	f := newFixtureWith(t, false, serviceConfig, []servicetest.SkillSpec{
		{Name: "host-tools", Allowed: []string{"Read", "Write", "Edit", "Bash"}, Files: script},
		{Name: "reader", Allowed: []string{"Read"}, Files: script},
		{Name: "python-only", Allowed: []string{"Bash(python:*)"}, Files: script},
	})
	ctx := context.Background()
	for _, tc := range []struct {
		skill string
		ok    bool
		want  []string
		not   string
	}{
		{skill: "host-tools", ok: true},
		{skill: "python-only", ok: true},
		{skill: "reader", want: []string{`allowed-tools of skill "reader" (`, `SKILL.md)`, `which lists "Read"`,
			`add Bash or skills.run_script to the skill's allowed-tools, or set tool_mode = "preapprove" in the daemon block`}, not: "cannot be overridden"},
		{skill: "denied", want: []string{`policy "no" (service.hcl:`, "a policy deny cannot be overridden"}, not: "add Bash"},
	} {
		t.Run(tc.skill, func(t *testing.T) {
			_, err := f.svc.Run(ctx, owner, service.RunRequest{Skill: f.sk[tc.skill], Script: "scripts/run.sh"}, service.RunOptions{Method: "skillbox run"})
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if api.KindOf(err) != api.KindDenied {
				t.Fatalf("error %v (kind %s), want denied", err, api.KindOf(err))
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), tc.not) {
				t.Errorf("error %q says %q: wrong cause", err, tc.not)
			}
		})
	}
}

// tools.check answers with the same cause and fix a run's refusal has.
func TestAllowedToolsCheckToolReason(t *testing.T) {
	f := newFixtureWith(t, true, serviceConfig, []servicetest.SkillSpec{
		{Name: "host-tools", Allowed: []string{"Read", "Write", "Edit", "Bash"}},
		{Name: "reader", Allowed: []string{"Read"}},
	})
	ctx := context.Background()
	for _, tc := range []struct {
		skill, tool, want string
		reason            []string
	}{
		{"host-tools", "skills.run_script", "allow", nil},
		{"host-tools", "skills.read", "allow", nil},
		{"reader", "skills.read", "allow", nil},
		{"reader", "skills.run_script", "deny", []string{`which lists "Read"`, "add Bash or skills.run_script to the skill's allowed-tools"}},
	} {
		t.Run(tc.skill+"/"+tc.tool, func(t *testing.T) {
			sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{UsesSkills: []string{tc.skill}})).SessionID
			r, err := f.svc.CheckTool(ctx, owner, api.CheckToolParams{SessionID: sid, Tool: tc.tool})
			if err != nil {
				t.Fatal(err)
			}
			if r.Decision != tc.want {
				t.Fatalf("%+v, want %s", r, tc.want)
			}
			for _, w := range tc.reason {
				if !strings.Contains(r.Reason, w) {
					t.Errorf("reason %q lacks %q", r.Reason, w)
				}
			}
		})
	}
}
