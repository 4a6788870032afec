package policy

import (
	"encoding/json"
	"fmt"
	"os/user"
	"strconv"
	"strings"

	"github.com/skillbox/skillbox/runtime"
)

// Effect is a decision's outcome.
type Effect string

const (
	EffectAllow   Effect = "allow"
	EffectDeny    Effect = "deny"
	EffectConfirm Effect = "confirm"
)

// rank orders effects from least to most restrictive.
func (e Effect) rank() int {
	switch e {
	case EffectAllow:
		return 0
	case EffectConfirm:
		return 1
	}
	return 2
}

// Request is one question to the engine: may this skill's session call Tool
// with Input?
type Request struct {
	Skill string
	// AllowedTools is the skill's own allowed-tools field; nil means the
	// skill does not declare it (an empty, non-nil list declares "none").
	AllowedTools []string
	Tool         string
	Input        json.RawMessage // JSON object, e.g. {"command": "git status"}; may be empty
	// Source optionally says where allowed-tools was declared
	// ("/srv/skills/x/SKILL.md:4") so decisions can name it.
	Source string
}

// Decision is the engine's answer. Rule names what decided, with file:line.
type Decision struct {
	Effect Effect `json:"decision"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	// Fix is the smallest change that would allow a denied call (which
	// entry to add to the skill's allowed-tools, which rule to change);
	// empty when the call is not denied or the reason already says it.
	Fix string `json:"fix,omitempty"`
}

// Why is the reason followed by the fix, for a refusal's text.
func (d Decision) Why() string {
	if d.Fix == "" {
		return d.Reason
	}
	return d.Reason + "; " + d.Fix
}

// Rule names for decisions no policy block made.
const (
	RuleDefaultDeny = "default deny"
	RuleBadRequest  = "invalid request"
	// RuleNetworkDefault: no matching rule says network = true.
	RuleNetworkDefault = "default: network off (no matching rule sets network = true)"
)

// Strictest combines decisions (one per active skill, say): any deny wins,
// then any confirm, then allow. No decisions at all is a deny.
func Strictest(ds ...Decision) Decision {
	if len(ds) == 0 {
		return Decision{Effect: EffectDeny, Rule: RuleDefaultDeny, Reason: "nothing was decided"}
	}
	best := ds[0]
	for _, d := range ds[1:] {
		if d.Effect.rank() > best.Effect.rank() {
			best = d
		}
	}
	return best
}

func ruleList(rs []*Rule) string {
	if len(rs) == 0 {
		return "none"
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.String()
	}
	return strings.Join(names, ", ")
}

// Decide answers a tools.check (or a skillbox tool call) for one skill.
//
// Policy first: among the rules matching the skill, a deny pattern covering
// the call denies; otherwise a confirm pattern asks for confirmation;
// otherwise a tools pattern allows; otherwise it is denied by default. Then
// the skill's allowed-tools, per daemon.tool_mode: restrict denies calls
// outside the list; preapprove leaves the policy's answer as it is. A
// skill's own text only ever narrows policy: no mode turns a policy deny or
// confirm into anything looser.
func (c *Config) Decide(req Request) Decision {
	return c.For(req.Skill).Decide(req)
}

func (sp *SkillPolicy) decide(req Request) Decision {
	if req.Tool == "" || !validToolNameChars(req.Tool, false) {
		return Decision{Effect: EffectDeny, Rule: RuleBadRequest,
			Reason: fmt.Sprintf("invalid tool name %q: give the bare tool name and put its arguments in input", req.Tool)}
	}
	if req.Tool == NetworkTool {
		return sp.decideNetwork()
	}
	if req.Tool == WorkspaceTool {
		return sp.decideWorkspace(req.Input)
	}
	cl, err := newCall(req.Tool, req.Input)
	if err != nil {
		return Decision{Effect: EffectDeny, Rule: RuleBadRequest, Reason: err.Error()}
	}
	d := sp.decidePolicy(cl)
	if req.AllowedTools == nil || d.Effect == EffectDeny {
		return d
	}

	src := fmt.Sprintf("allowed-tools of skill %q", req.Skill)
	if req.Source != "" {
		src += " (" + req.Source + ")"
	}
	p, listed := firstMatch(allowedPatterns(req.AllowedTools), cl, modeGrant)
	switch sp.toolMode {
	case ToolModePreapprove:
		// The skill is not the approver: whoever can write its SKILL.md
		// could otherwise waive a confirmation the policy asks for.
		if listed && d.Effect == EffectConfirm {
			d.Reason += fmt.Sprintf("; %q in the skill's allowed-tools (%s) cannot waive a confirmation the policy asks for", p.raw, src)
		}
	default:
		if !listed {
			return Decision{Effect: EffectDeny, Rule: src, Reason: outsideList(req, cl),
				Fix: fmt.Sprintf("to allow it, add %s to the skill's allowed-tools, or set tool_mode = %q in the daemon block", suggestEntry(cl), ToolModePreapprove)}
		}
	}
	return d
}

// outsideList says why a call is outside a skill's allowed-tools: the
// list as declared, and what of skillbox's its entries cover.
func outsideList(req Request, cl *call) string {
	mode := fmt.Sprintf("under tool_mode %q only calls that list covers may run while the skill is active", ToolModeRestrict)
	if len(req.AllowedTools) == 0 {
		return fmt.Sprintf("skill %q declares an empty allowed-tools, so no %q call is covered; %s", req.Skill, cl.tool, mode)
	}
	var covers []string
	for _, e := range ExplainAllowedTools(req.AllowedTools) {
		if len(e.Covers) > 0 && e.Kind != EntrySkillbox {
			covers = append(covers, e.Entry+" covers "+strings.Join(e.Covers, ", "))
		}
	}
	what := ""
	if len(covers) > 0 {
		what = " (" + strings.Join(covers, "; ") + ")"
	}
	return fmt.Sprintf("this %q call is outside the allowed-tools of skill %q, which lists %q%s; %s",
		cl.tool, req.Skill, strings.Join(req.AllowedTools, " "), what, mode)
}

func (sp *SkillPolicy) decidePolicy(cl *call) Decision {
	skill, rules := sp.Skill, sp.rules
	for _, r := range rules {
		if p, ok := firstMatch(r.deny, cl, modeRestrict); ok {
			return Decision{Effect: EffectDeny, Rule: r.String(),
				Reason: fmt.Sprintf("tool %q is denied for skill %q by %q in deny", cl.tool, skill, p.raw),
				Fix:    fmt.Sprintf("a policy deny cannot be overridden (not by the skill's allowed-tools nor by tool_mode): change %s if this is intended", r.String())}
		}
	}
	for _, r := range rules {
		if p, ok := firstMatch(r.confirm, cl, modeRestrict); ok {
			return Decision{Effect: EffectConfirm, Rule: r.String(),
				Reason: fmt.Sprintf("tool %q for skill %q needs an approver's confirmation (%q in confirm)", cl.tool, skill, p.raw)}
		}
	}
	for _, r := range rules {
		if p, ok := firstMatch(r.tools, cl, modeGrant); ok {
			return Decision{Effect: EffectAllow, Rule: r.String(),
				Reason: fmt.Sprintf("tool %q is allowed for skill %q by %q in tools", cl.tool, skill, p.raw)}
		}
	}
	return Decision{Effect: EffectDeny, Rule: RuleDefaultDeny,
		Reason: fmt.Sprintf("no policy rule allows tool %q (with this input) for skill %q; rules for this skill: %s", cl.tool, skill, ruleList(rules)),
		Fix:    fmt.Sprintf("to allow it, add %q to the tools of a policy block whose skills match %q", policyEntry(cl), skill)}
}

// decideNetwork answers the "network" pseudo-tool: denied unless network is
// allowed for the skill, then confirm if a matching rule lists "network" in
// confirm, else allow.
func (p *SkillPolicy) decideNetwork() Decision {
	skill := p.Skill
	ok, rule := p.Network.Value, p.Network.Rule
	if !ok && rule == RuleNetworkDefault {
		// Egress destinations are network access too, through the proxy.
		if len(p.Egress.Value) > 0 {
			ok, rule = true, p.Egress.Rule
		}
	}
	if !ok {
		fix := fmt.Sprintf("to allow it, set network = true (or egress destinations) in a policy block whose skills match %q", skill)
		if rule != RuleNetworkDefault {
			fix = fmt.Sprintf("%s sets network = false, which no other rule overrides: change it if this is intended", rule)
		}
		return Decision{Effect: EffectDeny, Rule: rule, Reason: fmt.Sprintf("network access is off for skill %q", skill), Fix: fix}
	}
	for _, r := range p.rules {
		for _, pat := range r.confirm {
			if pat.name == NetworkTool && !pat.hasSpec {
				return Decision{Effect: EffectConfirm, Rule: r.String(),
					Reason: fmt.Sprintf("network access for skill %q needs an approver's confirmation", skill)}
			}
		}
	}
	return Decision{Effect: EffectAllow, Rule: rule, Reason: fmt.Sprintf("network access is allowed for skill %q", skill)}
}

// NetworkFor says whether runs of a skill may use the network: only if a
// matching rule sets network = true and none sets it false. The string names
// the deciding rule. It is For(skill).Network, for callers that ask
// nothing else.
func (c *Config) NetworkFor(skill string) (bool, string) {
	n := c.For(skill).Network
	return n.Value, n.Rule
}

// Tighten returns base with every field that req sets and that is stricter
// taken from req (zero fields in either mean "not set"). Use it to apply a
// caller's requested limits (timeout_ms, --memory) without ever loosening
// what policy gives.
func Tighten(base, req runtime.Limits) runtime.Limits {
	out := base
	for _, f := range runtime.LimitFields {
		if f.IsSet(&req) && (!f.IsSet(&out) || f.Stricter(&req, &out)) {
			f.Copy(&out, &req)
		}
	}
	return out
}

// LimitsFor returns a skill's run limits: per field, the strictest of the
// config's limits and every matching rule's limits. The strings name the
// sources that set at least one resulting value (the config's limits block
// first, then rules by name). It is For(skill).Limits, for callers that ask
// nothing else.
func (c *Config) LimitsFor(skill string) (runtime.Limits, []string) {
	l := c.For(skill).Limits
	return l.Value, l.Rules
}

// IsApprover reports whether a peer may approve confirmations: its uid or its
// user name is in daemon.approvers. An empty username is looked up from uid.
func (c *Config) IsApprover(uid uint32, username string) bool {
	id := strconv.FormatUint(uint64(uid), 10)
	looked := false
	for _, a := range c.Daemon.Approvers {
		if a == id {
			return true
		}
		if username == "" && !looked {
			looked = true
			if u, err := user.LookupId(id); err == nil {
				username = u.Username
			}
		}
		if username != "" && a == username {
			return true
		}
	}
	return false
}
