package policy

import (
	"strings"

	"github.com/skillbox/skillbox/runtime/egress"
)

// RuleEgressDefault: no matching rule lists egress destinations.
const RuleEgressDefault = "default: no egress (no matching rule lists egress destinations)"

// egressList decodes a rule's egress = [...] (destinations like
// "api.example.com:443", "*.example.org:443", "10.1.2.0/24:5432"); each
// bad entry is a problem at its file:line.
func (b *body) egressList(r *Rule) {
	var dests []string
	a := b.strs("egress", &dests)
	if a == nil {
		return
	}
	seen := map[string]bool{}
	for _, s := range dests {
		d, err := egress.ParseRule(s)
		if err != nil {
			b.bad(a, "%s", strings.TrimPrefix(err.Error(), egress.ErrBadDestination.Error()+": "))
			continue
		}
		if seen[d.String()] {
			continue
		}
		seen[d.String()] = true
		d.Source = r.String()
		r.Egress = append(r.Egress, d)
	}
}

// EgressFor returns the destinations runs of a skill may reach through the
// egress proxy: those of every matching rule together, each naming the
// rule that lists it. A matching rule with network = false denies them all
// (deny wins); the string names it, or the rules that gave destinations,
// or RuleEgressDefault.
func (c *Config) EgressFor(skill string) ([]egress.Rule, string) {
	var out []egress.Rule
	var from []string
	seen := map[string]bool{}
	for _, r := range c.matching(skill) {
		if r.Network != nil && !*r.Network {
			return nil, r.String()
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
		return nil, RuleEgressDefault
	}
	return out, strings.Join(from, ", ")
}
