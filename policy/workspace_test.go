package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

const workspaceHCL = `
policy "default" {
  skills = ["*"]
  tools  = ["skills.run_script"]
}
policy "projects" {
  skills           = ["docs-*"]
  workspace        = "write"
  workspace_paths  = ["/home/*/projects/**"]
  workspace_delete = true
}
policy "careful" {
  skills    = ["docs-careful"]
  workspace = "read"
}
policy "walled" {
  skills    = ["walled"]
  workspace = "none"
}
policy "ask" {
  skills             = ["docs-ask"]
  confirm            = ["workspace"]
  workspace_excludes = ["*.log"]
}
policy "no-delete" {
  skills           = ["docs-nodel"]
  workspace_delete = false
}
`

func TestSkillPolicyWorkspace(t *testing.T) {
	c, err := Parse([]byte(workspaceHCL), "ws.hcl")
	if err != nil {
		t.Fatal(err)
	}
	host := func(dir string) WorkspaceRequest { return WorkspaceRequest{Dir: dir, Kind: api.WorkspaceHost} }
	for _, tc := range []struct {
		name, skill string
		req         WorkspaceRequest
		mode        string
		del         bool
		rule        string
		effect      Effect
	}{
		{"host default is read-only", "plain", host("/srv/x"), api.WorkspaceRead, false, RuleWorkspaceHostDefault, EffectAllow},
		{"session default is writable", "plain", WorkspaceRequest{Dir: "/var/lib/skillbox/ws/s1", Kind: api.WorkspaceSession}, api.WorkspaceWrite, true, RuleWorkspaceSessionDefault, EffectAllow},
		{"a rule grants write under its paths", "docs-pdf", host("/home/ann/projects/report"), api.WorkspaceWrite, true, `policy "projects" (ws.hcl:6)`, EffectAllow},
		{"not outside them", "docs-pdf", host("/home/ann/secrets"), api.WorkspaceRead, false, RuleWorkspaceHostDefault, EffectAllow},
		{"the strictest mode wins", "docs-careful", host("/home/ann/projects/report"), api.WorkspaceRead, false, `policy "careful" (ws.hcl:12)`, EffectAllow},
		{"none refuses", "walled", host("/srv/x"), api.WorkspaceNone, false, `policy "walled" (ws.hcl:16)`, EffectDeny},
		{"confirm asks", "docs-ask", host("/srv/x"), api.WorkspaceRead, false, RuleWorkspaceHostDefault, EffectConfirm},
		{"one false wins over true", "docs-nodel", host("/home/ann/projects/report"), api.WorkspaceWrite, false, `policy "projects" (ws.hcl:6)`, EffectAllow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := c.For(tc.skill).Workspace(tc.req)
			if g.Mode != tc.mode || g.Delete != tc.del || g.Rule != tc.rule {
				t.Errorf("grant = %+v, want mode %s delete %v rule %s", g, tc.mode, tc.del, tc.rule)
			}
			in, _ := json.Marshal(tc.req)
			if d := c.Decide(Request{Skill: tc.skill, Tool: WorkspaceTool, Input: in}); d.Effect != tc.effect {
				t.Errorf("decision %+v, want %s", d, tc.effect)
			}
		})
	}
	if g := c.For("docs-ask").Workspace(host("/srv/x")); strings.Join(g.Excludes, ",") != "*.log" {
		t.Errorf("a rule's excludes replace the defaults: %q", g.Excludes)
	}
	if g := c.For("plain").Workspace(host("/srv/x")); len(g.Excludes) == 0 {
		t.Errorf("no rule lists excludes: the defaults apply, got none")
	}
	// "workspace" in confirm is the pseudo-tool, never a host tool.
	if d := c.Decide(Request{Skill: "docs-ask", Tool: "workspace"}); d.Effect != EffectDeny || d.Rule != RuleBadRequest {
		t.Errorf("the workspace tool without its input: %+v", d)
	}
}

func TestWorkspaceRuleErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"policy \"a\" {\n skills = [\"*\"]\n workspace = \"rw\"\n}", `use "none", "read" or "write"`},
		{"policy \"a\" {\n skills = [\"*\"]\n workspace_paths = [\"home/*\"]\n}", "not an absolute path pattern"},
		{"policy \"a\" {\n skills = [\"*\"]\n tools = [\"workspace\"]\n}", "is not a tool here"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if _, err := Parse([]byte(tc.src), "bad.hcl"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
