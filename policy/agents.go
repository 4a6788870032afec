package policy

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Agent is an agent "NAME" {} block: skills bound to a specialist agent,
// loaded (subject to policy) into every session created for it.
type Agent struct {
	Name       string
	UsesSkills []string
	Pos        Pos
}

// String names the block the way messages do: `agent "x" (skillbox.hcl:30)`.
func (a *Agent) String() string { return fmt.Sprintf("agent %q (%s)", a.Name, a.Pos) }

var agentSchema = &hcl.BodySchema{Attributes: attrs("uses_skills")}

func (d *decoder) agent(blk *hcl.Block) {
	name, prefix, ok := d.label(blk, "agent", "agent")
	if !ok {
		return
	}
	a := &Agent{Name: name, Pos: d.pos(blk.DefRange)}
	b, _ := d.body(blk.Body, prefix, agentSchema)
	if at := b.strs("uses_skills", &a.UsesSkills); at != nil {
		if len(a.UsesSkills) == 0 {
			b.bad(at, "is empty: list the skills this agent always has, like [\"pdf\"]")
		}
		for _, s := range a.UsesSkills {
			if s == "" || !labelRE.MatchString(s) {
				b.bad(at, "%q is not a skill name", s)
			}
		}
	} else if b.attrs["uses_skills"] == nil {
		d.errorf(blk.DefRange, b.field("uses_skills"), "is required: list the skills bound to this agent, like uses_skills = [\"pdf\"]")
	}
	if d.cfg.Agents == nil {
		d.cfg.Agents = map[string]*Agent{}
	}
	d.cfg.Agents[name] = a
}

// Hook failure modes (a policy rule's hook_failure): what a hook that
// fails to give an answer (crashes, exits with a status other than 0 or
// 2, prints malformed JSON, times out) counts as.
const (
	HookFailureDeny    = "deny"
	HookFailureConfirm = "confirm"
	HookFailureIgnore  = "ignore"
)

// DefaultHookTimeout bounds a hook run when neither the hook nor a policy
// rule says otherwise.
const DefaultHookTimeout = 10 * time.Second

// HookPolicy (SkillPolicy.Hooks) is how a skill's hooks are run: what a failed hook counts as
// (the strictest of the matching rules; deny when none says) and the
// longest a hook may run (the strictest; DefaultHookTimeout when none
// says). Rule names the rule that chose the failure mode ("" for the default).
type HookPolicy struct {
	Failure string
	Timeout time.Duration
	Rule    string
}
