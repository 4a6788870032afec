package policy

import (
	"path"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/skillbox/skillbox/runtime"
)

func (d *decoder) policy(blk *hcl.Block) {
	name, prefix, ok := d.label(blk, "policy", "rule")
	if !ok {
		return
	}
	r := &Rule{Name: name, Pos: d.pos(blk.DefRange)}
	b, blocks := d.body(blk.Body, prefix, policySchema)

	if a := b.strs("skills", &r.Skills); a != nil {
		if len(r.Skills) == 0 {
			b.bad(a, "must list at least one skill name pattern, like [\"*\"]")
		}
		for _, p := range r.Skills {
			if p == "" {
				b.bad(a, "empty skill pattern")
			} else if _, err := path.Match(p, ""); err != nil {
				b.bad(a, "invalid glob %q: %v", p, err)
			}
		}
	} else if b.attrs["skills"] == nil {
		d.errorf(blk.DefRange, b.field("skills"), "is required: list the skill name patterns this rule applies to, like skills = [\"*\"]")
	}
	list := func(field string, dst *[]string, pats *[]toolPattern, networkOK bool) {
		a := b.strs(field, dst)
		if a == nil {
			return
		}
		for _, s := range *dst {
			if s == NetworkTool || s == WorkspaceTool {
				if !networkOK {
					b.bad(a, "%q is not a tool here: use %s = ... in the rule (and confirm = [%q] to ask first)", s, s, s)
				}
				*pats = append(*pats, toolPattern{raw: s, name: s})
				continue
			}
			p, err := parseToolPattern(s)
			if err != nil {
				b.bad(a, "%v", err)
				continue
			}
			*pats = append(*pats, p)
		}
	}
	list("tools", &r.Tools, &r.tools, false)
	list("deny", &r.Deny, &r.deny, false)
	list("confirm", &r.Confirm, &r.confirm, true)
	var net bool
	if b.boolean("network", &net) != nil {
		r.Network = &net
	}
	b.egressList(r)
	b.workspaceRule(r)
	b.isolationRule(r)
	var dirs []string
	if a := b.strs("script_dirs", &dirs); a != nil {
		ok := true
		for _, dir := range dirs {
			if err := checkScriptDir(dir); err != "" {
				b.bad(a, "%q %s", dir, err)
				ok = false
			}
		}
		if ok && len(dirs) == 0 {
			b.bad(a, "is empty, which would allow no script at all: list directories like [\"scripts\"], or leave script_dirs out to allow any file of the skill")
			ok = false
		}
		if ok {
			r.ScriptDirs = dirs
		}
	}
	var env []string
	if a := b.strs("env", &env); a != nil {
		ok := true
		for _, e := range env {
			if why := runtime.CheckEnvPattern(e); why != "" {
				b.bad(a, "%q %s", e, why)
				ok = false
			}
		}
		if ok {
			r.Env = env
		}
	}
	var pkgs *hcl.Block
	for _, lb := range blocks {
		if lb.Type == "packages" {
			if pkgs != nil {
				d.errorf(lb.DefRange, prefix+".packages", "declared twice (first at line %d); merge the two blocks", pkgs.DefRange.Start.Line)
				continue
			}
			pkgs = lb
		}
	}
	d.rulePackages(r, b, pkgs)
	blocks = slices.DeleteFunc(blocks, func(lb *hcl.Block) bool { return lb.Type == "packages" })
	var lock bool
	if b.boolean("require_lock", &lock) != nil {
		r.RequireLock = &lock
	}
	b.oneOf("hook_failure", &r.HookFailure, HookFailureDeny, HookFailureConfirm, HookFailureIgnore)
	b.duration("hook_timeout", &r.HookTimeout)
	for i, lb := range blocks {
		if i > 0 {
			d.errorf(lb.DefRange, prefix+".limits", "declared twice (first at line %d); merge the two blocks", blocks[0].DefRange.Start.Line)
			continue
		}
		r.Limits, _ = d.limits(lb, prefix+".limits")
	}
	d.cfg.Rules = append(d.cfg.Rules, r)
}
