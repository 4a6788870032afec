package policy

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"

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

// Egress is the egress {} block: how the egress proxy resolves names.
type Egress struct {
	// HostsFile, in /etc/hosts format, maps names to addresses for the
	// proxy before DNS; its addresses are trusted as written (an internal
	// service on a private address needs no address rule). The names must
	// still be allowed by a rule's egress list.
	HostsFile string
	Pos       Pos
}

var egressSchema = &hcl.BodySchema{Attributes: attrs("hosts_file")}

func (d *decoder) egress(blk *hcl.Block) {
	ec := &d.cfg.Egress
	ec.Pos = d.pos(blk.DefRange)
	b, _ := d.body(blk.Body, "egress", egressSchema)
	b.path("hosts_file", &ec.HostsFile)
}

// LoadHosts reads HostsFile (nil without one).
func (e Egress) LoadHosts() (map[string][]netip.Addr, error) {
	if e.HostsFile == "" {
		return nil, nil
	}
	f, err := os.Open(e.HostsFile)
	if err != nil {
		return nil, fmt.Errorf("%w: egress.hosts_file (%s): %v", ErrConfig, e.Pos, err)
	}
	defer f.Close()
	hosts, err := egress.ParseHosts(f)
	if err != nil {
		return nil, fmt.Errorf("%w: egress.hosts_file %s: %v", ErrConfig, e.HostsFile, err)
	}
	return hosts, nil
}
