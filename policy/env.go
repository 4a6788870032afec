package policy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// Which environment a caller may pass to a skill's run is policy: the
// documented defaults (runtime.DefaultEnvAllow: locale, time zone,
// terminal) plus the names the matching rules list in env. Names that
// control interpreters, the loader or tools (runtime.EnvNeverAllowed) are
// refused whatever the rules say, and a rule cannot name them.

// RuleEnvDefault names the allowlist when no matching rule sets env.
const RuleEnvDefault = "the default environment allowlist (locale, time zone, terminal)"

// CheckEnv checks the names a caller passes to a run against Env; the
// error wraps ErrDenied and names the variable and what to change. A
// combined policy (StrictestPolicy) checks every skill's, in order.
func (p *SkillPolicy) CheckEnv(names []string) error {
	for _, q := range p.Parts() {
		if err := q.checkEnv(names); err != nil {
			return err
		}
	}
	return nil
}

func (p *SkillPolicy) checkEnv(names []string) error {
	skill, patterns, rules := p.Skill, p.Env.Value, p.Env.Rules
	sorted := append([]string{}, names...)
	sort.Strings(sorted)
	for _, n := range sorted {
		if why := runtime.EnvNeverAllowed(n); why != "" {
			return errkind.Errorf(ErrDenied, "environment variable %q %s; no policy rule can allow it", n, why)
		}
		ok := false
		for _, p := range patterns {
			if runtime.EnvPatternMatch(p, n) {
				ok = true
				break
			}
		}
		if !ok {
			where := "add it to env in a policy rule whose skills match " + fmt.Sprintf("%q", skill)
			if len(rules) > 0 {
				where += " (e.g. " + strings.Join(rules, ", ") + ")"
			}
			return errkind.Errorf(ErrDenied, "environment variable %q is not allowed for skill %q: only %s and names a policy rule lists in env may be passed; %s, like env = [%q]", n, skill, RuleEnvDefault, where, n)
		}
	}
	return nil
}
