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

// EnvFor returns the environment patterns skill's runs may be given (the
// defaults first, then every matching rule's env) and the rules that added
// to them.
func (c *Config) EnvFor(skill string) (patterns []string, rules []string) {
	patterns = append([]string{}, runtime.DefaultEnvAllow...)
	for _, r := range c.matching(skill) {
		if len(r.Env) == 0 {
			continue
		}
		patterns = append(patterns, r.Env...)
		rules = append(rules, r.String())
	}
	return patterns, rules
}

// CheckEnv checks the names a caller passes to a run of skill against
// EnvFor; the error wraps ErrDenied and names the variable and what to
// change.
func (c *Config) CheckEnv(skill string, names []string) error {
	patterns, rules := c.EnvFor(skill)
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
