package policy

import (
	"sort"
	"strings"
	"sync/atomic"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
)

// Ruled is one facet of a skill's policy and the rule (or default) that
// set it.
type Ruled[T any] struct {
	Value T
	Rule  string
}

// Sourced is a facet several sources add up to, and those sources in the
// order they count (the config's limits block first, then rules by name).
type Sourced[T any] struct {
	Value T
	Rules []string
}

// SkillPolicy is everything the config says about one skill's runs, with
// the rule behind each facet. Config.For matches the rules once and
// resolves every facet from that one match, so a run asks policy once and
// what it is told holds for the whole run: its tool decisions, its plan and
// its sandbox. StrictestPolicy combines the policies of the skills a run
// mounts.
type SkillPolicy struct {
	// Skill is the skill the rules were matched to; a combined policy
	// names its skills, comma-separated.
	Skill string
	// ScriptDirs are the directories of the skill its scripts may be run
	// from (see ScriptInDirs); nil: any file, by RuleScriptDirsDefault.
	ScriptDirs Ruled[[]string]
	// Limits: per field, the strictest of the config's limits and every
	// matching rule's.
	Limits Sourced[runtime.Limits]
	// Network: only if a matching rule sets network = true and none sets
	// it false.
	Network Ruled[bool]
	// Egress are the destinations runs may reach through the egress proxy
	// (nil when a matching rule sets network = false, or none lists any).
	Egress Ruled[[]egress.Rule]
	// Secrets are those the egress proxy adds for runs with Egress.
	Secrets []*Secret
	// Env are the environment patterns runs may be given: the defaults,
	// then every matching rule's env (Rules: those that added to them).
	Env Sourced[[]string]
	// Isolation: session only if a matching rule says session and none
	// says run.
	Isolation Ruled[Isolation]
	// Packages is what the config adds to the skill's dependencies.
	Packages SkillPackages
	// Hooks is how the skill's hooks are run.
	Hooks HookPolicy
	// Lock: the skill loads and runs only at a version pinned in the lock
	// file (Rule "" when no rule requires it).
	Lock Ruled[bool]

	toolMode ToolMode
	rules    []*Rule        // the matching rules, by name
	parts    []*SkillPolicy // a combined policy's skills, in mount order
}

// passCounter counts how often rules were matched to a skill.
type passCounter struct{ n atomic.Uint64 }

// RulePasses is how many times the rules were matched to a skill since the
// config was read: once per Config.For. It shows that a run asks policy
// once.
func (c *Config) RulePasses() uint64 {
	if c.passes == nil {
		return 0
	}
	return c.passes.n.Load()
}

// For matches the rules to skill once and resolves every facet of its
// policy from that match. The skill "" is the view of run_code without
// skills and of the defaults.
func (c *Config) For(skill string) *SkillPolicy {
	if c.passes != nil {
		c.passes.n.Add(1)
	}
	var inFile []*Rule
	for _, r := range c.Rules {
		if r.matches(skill) {
			inFile = append(inFile, r)
		}
	}
	// By name, so that which rule a facet names never depends on the
	// order of the file.
	rules := append([]*Rule(nil), inFile...)
	sort.SliceStable(rules, func(i, j int) bool { return rules[i].Name < rules[j].Name })

	p := &SkillPolicy{Skill: skill, toolMode: c.Daemon.ToolMode, rules: rules}
	p.ScriptDirs = scriptDirsOf(rules)
	p.Limits = c.limitsOf(rules)
	p.Network = networkOf(rules)
	p.Egress = egressOf(rules)
	p.Secrets = c.SecretsFor(skill, p.Egress.Value)
	p.Env = envOf(rules)
	p.Isolation = isolationOf(rules)
	p.Packages = packagesOf(inFile)
	p.Hooks = hooksOf(rules)
	p.Lock = lockOf(rules)
	return p
}

// ForSkills is the policy of a run that mounts the named skills: For of
// each, combined by StrictestPolicy; no skills is the view of the skill "".
// Its Parts are each skill's.
func (c *Config) ForSkills(names ...string) *SkillPolicy {
	if len(names) == 0 {
		return c.For("")
	}
	ps := make([]*SkillPolicy, len(names))
	for i, n := range names {
		ps[i] = c.For(n)
	}
	return StrictestPolicy(ps...)
}

// StrictestPolicy combines the policies of the skills one run mounts (a
// skills.run_code run), each as strict as the strictest of them: the
// limits are the strictest per field (the sources of every skill, once,
// in order); isolation is session only if every skill's is (else the
// rule of the first skill's that is not); network only if every skill's
// allows it; a lock is required if any skill's requires one. Such a run
// gets no egress destinations. Its workspace grant and environment check
// combine every skill's (Workspace, CheckEnv). Decisions, and the facets
// that are only ever a skill's own (ScriptDirs, Env, Packages, Hooks), stay
// each skill's (Parts): Decide gives the strictest decision of them.
func StrictestPolicy(ps ...*SkillPolicy) *SkillPolicy {
	if len(ps) == 1 {
		return ps[0]
	}
	names := make([]string, len(ps))
	out := &SkillPolicy{parts: ps, Egress: Ruled[[]egress.Rule]{Rule: RuleEgressDefault}}
	seen := map[string]bool{}
	for i, p := range ps {
		names[i] = p.Skill
		if i == 0 {
			out.Limits.Value = p.Limits.Value
			out.Isolation, out.Network, out.toolMode = p.Isolation, p.Network, p.toolMode
		} else {
			out.Limits.Value = Tighten(out.Limits.Value, p.Limits.Value)
			if out.Isolation.Value == IsolationSession && p.Isolation.Value != IsolationSession {
				out.Isolation = p.Isolation
			}
			if out.Network.Value && !p.Network.Value {
				out.Network = p.Network
			}
		}
		for _, r := range p.Limits.Rules {
			if !seen[r] {
				seen[r] = true
				out.Limits.Rules = append(out.Limits.Rules, r)
			}
		}
		if p.Lock.Value && !out.Lock.Value {
			out.Lock = p.Lock
		}
	}
	out.Skill = strings.Join(names, ",")
	return out
}

// Parts are the policies a combined policy was made of (StrictestPolicy),
// or the policy itself.
func (p *SkillPolicy) Parts() []*SkillPolicy {
	if p.parts == nil {
		return []*SkillPolicy{p}
	}
	return p.parts
}

// Decide answers a tool call for the policy's skill (req.Skill is taken
// to be it) as Config.Decide does; a combined policy gives the strictest
// decision of its skills.
func (p *SkillPolicy) Decide(req Request) Decision {
	if p.parts != nil {
		ds := make([]Decision, len(p.parts))
		for i, q := range p.parts {
			r := req
			r.Skill = q.Skill
			ds[i] = q.Decide(r)
		}
		return Strictest(ds...)
	}
	req.Skill = p.Skill
	return p.decide(req)
}

func scriptDirsOf(rules []*Rule) Ruled[[]string] {
	var dirs, names []string
	for _, r := range rules {
		if r.ScriptDirs == nil {
			continue
		}
		names = append(names, r.String())
		if dirs == nil {
			dirs = append([]string{}, r.ScriptDirs...)
			continue
		}
		dirs = intersectDirs(dirs, r.ScriptDirs)
	}
	if names == nil {
		return Ruled[[]string]{Rule: RuleScriptDirsDefault}
	}
	sort.Strings(dirs)
	return Ruled[[]string]{Value: dirs, Rule: strings.Join(names, ", ")}
}

func (c *Config) limitsOf(rules []*Rule) Sourced[runtime.Limits] {
	out := c.Limits.WithDefaults()
	src := make([]string, len(runtime.LimitFields))
	base := "limits (" + c.LimitsPos.String() + ")"
	for i := range src {
		src[i] = base
	}
	for _, r := range rules {
		for i, f := range runtime.LimitFields {
			if f.IsSet(&r.Limits) && f.Stricter(&r.Limits, &out) {
				f.Copy(&out, &r.Limits)
				src[i] = r.String()
			}
		}
	}
	var names []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			names = append(names, s)
		}
	}
	for _, s := range src {
		if s == base {
			add(s)
		}
	}
	for _, r := range rules {
		for _, s := range src {
			if s == r.String() {
				add(s)
			}
		}
	}
	return Sourced[runtime.Limits]{Value: out, Rules: names}
}

// vote is a yes/no that every matching rule may cast (field: nil when
// the rule does not say): yes only if some rule says yes and none says
// no. The rule is the first no, else the first yes, else nil.
func vote(rules []*Rule, field func(*Rule) *bool) (bool, *Rule) {
	var yes *Rule
	for _, r := range rules {
		v := field(r)
		if v == nil {
			continue
		}
		if !*v {
			return false, r
		}
		if yes == nil {
			yes = r
		}
	}
	return yes != nil, yes
}

func networkOf(rules []*Rule) Ruled[bool] {
	ok, r := vote(rules, func(r *Rule) *bool { return r.Network })
	if r == nil {
		return Ruled[bool]{Value: false, Rule: RuleNetworkDefault}
	}
	return Ruled[bool]{Value: ok, Rule: r.String()}
}

func egressOf(rules []*Rule) Ruled[[]egress.Rule] {
	var out []egress.Rule
	var from []string
	seen := map[string]bool{}
	for _, r := range rules {
		if r.Network != nil && !*r.Network {
			return Ruled[[]egress.Rule]{Rule: r.String()}
		}
		if len(r.Egress) > 0 {
			from = append(from, r.String())
		}
		for _, d := range r.Egress {
			if !seen[d.String()] {
				seen[d.String()] = true
				out = append(out, d)
			}
		}
	}
	if len(out) == 0 {
		return Ruled[[]egress.Rule]{Rule: RuleEgressDefault}
	}
	return Ruled[[]egress.Rule]{Value: out, Rule: strings.Join(from, ", ")}
}

func envOf(rules []*Rule) Sourced[[]string] {
	out := Sourced[[]string]{Value: append([]string{}, runtime.DefaultEnvAllow...)}
	for _, r := range rules {
		if len(r.Env) == 0 {
			continue
		}
		out.Value = append(out.Value, r.Env...)
		out.Rules = append(out.Rules, r.String())
	}
	return out
}

func isolationOf(rules []*Rule) Ruled[Isolation] {
	var yes *Rule
	for _, r := range rules {
		switch r.Isolation {
		case IsolationRun:
			return Ruled[Isolation]{Value: IsolationRun, Rule: r.String()}
		case IsolationSession:
			if yes == nil {
				yes = r
			}
		}
	}
	if yes == nil {
		return Ruled[Isolation]{Value: IsolationRun, Rule: RuleIsolationDefault}
	}
	return Ruled[Isolation]{Value: IsolationSession, Rule: yes.String()}
}

// packagesOf gathers the packages blocks and build_from_source of the
// matching rules in file order (all apply together; a single
// build_from_source = false denies it).
func packagesOf(inFile []*Rule) SkillPackages {
	var out SkillPackages
	var where []string
	allow, deny := false, false
	for _, r := range inFile {
		if r.Packages != nil {
			out.Python = append(out.Python, r.Packages.Python...)
			out.Npm = append(out.Npm, r.Packages.Npm...)
			where = append(where, r.String())
		}
		if r.BuildFromSource != nil {
			if *r.BuildFromSource {
				allow = true
			} else {
				deny = true
			}
		}
	}
	out.BuildFromSource = allow && !deny
	out.Where = strings.Join(where, ", ")
	if out.Where == "" {
		out.Where = "config"
	}
	return out
}

func hooksOf(rules []*Rule) HookPolicy {
	hp := HookPolicy{Timeout: DefaultHookTimeout}
	rank := map[string]int{HookFailureIgnore: 0, HookFailureConfirm: 1, HookFailureDeny: 2}
	set := false
	for _, r := range rules {
		if r.HookFailure != "" && (!set || rank[r.HookFailure] > rank[hp.Failure]) {
			hp.Failure, hp.Rule, set = r.HookFailure, r.String(), true
		}
		if r.HookTimeout > 0 && r.HookTimeout < hp.Timeout {
			hp.Timeout = r.HookTimeout
		}
	}
	if !set {
		hp.Failure = HookFailureDeny
	}
	return hp
}

func lockOf(rules []*Rule) Ruled[bool] {
	ok, r := vote(rules, func(r *Rule) *bool { return r.RequireLock })
	if r == nil {
		return Ruled[bool]{}
	}
	return Ruled[bool]{Value: ok, Rule: r.String()}
}
