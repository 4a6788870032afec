package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/skillbox/skillbox/policy"
)

// printEgress explains which destinations a skill's runs may reach
// through the egress proxy, and which rule allows each.
func printEgress(tw io.Writer, cfg *policy.Config, skill string, fullNetwork bool) {
	dests, rule := cfg.EgressFor(skill)
	switch {
	case fullNetwork:
		fmt.Fprintf(tw, "  egress\tnot used: the skill has full network access (network = true)\n")
		return
	case len(dests) == 0 && rule == policy.RuleEgressDefault:
		fmt.Fprintf(tw, "  egress\tnone (no matching rule lists egress destinations)\n")
		return
	case len(dests) == 0:
		fmt.Fprintf(tw, "  egress\tnone: %s sets network = false, which overrides every egress list\n", rule)
		return
	}
	how := "through skillbox's egress proxy, every connection audited"
	if d := cfg.Decide(policy.Request{Skill: skill, Tool: policy.NetworkTool}); d.Effect == policy.EffectConfirm {
		how += "; each run asks an approver first (" + d.Rule + ")"
	}
	fmt.Fprintf(tw, "  egress\t%s\n", how)
	for _, d := range dests {
		fmt.Fprintf(tw, "    %s\t%s\n", d, d.Source)
	}
	for _, s := range cfg.SecretsFor(skill, dests) {
		from := "environment variable " + s.FromEnv
		if s.FromFile != "" {
			from = "file " + s.FromFile
		}
		fmt.Fprintf(tw, "  secret %s\tadded by the proxy as %q to HTTPS requests to %s (value from the daemon's %s; the sandbox sees a placeholder) (%s)\n",
			s.Name, s.Header, strings.Join(s.Hosts, ", "), from, s.Pos)
	}
	if h := cfg.Egress.HostsFile; h != "" {
		fmt.Fprintf(tw, "  egress hosts\tnames in %s resolve as written there (%s)\n", h, cfg.Egress.Pos)
	}
	l, _ := cfg.LimitsFor(skill)
	fmt.Fprintf(tw, "  egress caps\t%d connections, %s sent per run (limits egress_connections, egress_bytes_out)\n",
		l.EgressConnections, policy.FormatSize(l.EgressBytesOut))
}
