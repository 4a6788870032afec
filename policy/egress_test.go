package policy

import (
	"os"
	"strings"
	"testing"
)

func TestEgressFor(t *testing.T) {
	src, err := os.ReadFile("testdata/egress.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(src, "egress.hcl")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		skill   string
		dests   []string
		rule    string
		network Effect
	}{
		{"api-web", []string{"api.example.com:443", "*.example.org:443"}, `policy "api" (egress.hcl:6)`, EffectAllow},
		// Rules combine; a destination two rules list is there once.
		{"api-db", []string{"api.example.com:443", "*.example.org:443", "10.1.2.0/24:5432"}, `policy "api" (egress.hcl:6), policy "db" (egress.hcl:11)`, EffectConfirm},
		// network = false in any matching rule wins over every egress list.
		{"api-offline", nil, `policy "cut-off" (egress.hcl:21)`, EffectDeny},
		{"plain", nil, RuleEgressDefault, EffectDeny},
	}
	for _, tt := range tests {
		t.Run(tt.skill, func(t *testing.T) {
			dests, rule := cfg.EgressFor(tt.skill)
			var got []string
			for _, d := range dests {
				got = append(got, d.String())
				if !strings.HasPrefix(d.Source, `policy "`) {
					t.Errorf("destination %s has no source rule: %q", d, d.Source)
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.dests, " ") || rule != tt.rule {
				t.Errorf("EgressFor = %v, %q; want %v, %q", got, rule, tt.dests, tt.rule)
			}
			if d := cfg.Decide(Request{Skill: tt.skill, Tool: NetworkTool}); d.Effect != tt.network {
				t.Errorf("network decision %+v, want %s", d, tt.network)
			}
		})
	}
	lim, _ := cfg.LimitsFor("api-db")
	if lim.EgressConnections != 10 || lim.EgressBytesOut != 1<<20 {
		t.Errorf("egress limits %d %d", lim.EgressConnections, lim.EgressBytesOut)
	}
}
