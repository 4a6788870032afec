package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/service"
	"github.com/skillbox/skillbox/sandbox/service/servicetest"
)

// A skill's allowed-tools in a host's terms (issue 25): the host's shell
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
