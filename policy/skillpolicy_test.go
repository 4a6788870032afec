package policy

import "testing"

// TestForMatchesOnce: For matches the rules once, and what is decided or
// read from its result asks no more.
func TestForMatchesOnce(t *testing.T) {
	c, err := Parse([]byte(isolationHCL), "iso.hcl")
	if err != nil {
		t.Fatal(err)
	}
	before := c.RulePasses()
	p := c.For("nb-plot")
	p.Decide(Request{Tool: NetworkTool})
	p.Decide(Request{Tool: "skills.run_script", Input: []byte(`{"path": "scripts/a.py"}`)})
	p.Workspace(WorkspaceRequest{Dir: "/srv/x", Kind: "host"})
	if err := p.CheckEnv([]string{"LANG"}); err != nil {
		t.Fatal(err)
	}
	if got := c.RulePasses() - before; got != 1 {
		t.Errorf("%d rule passes, want 1", got)
	}
	if c.ForSkills("nb-plot", "server").Isolation.Value != IsolationSession || len(c.ForSkills("nb-plot", "server").Parts()) != 2 {
		t.Errorf("ForSkills does not combine its skills")
	}
}
