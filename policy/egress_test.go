package policy

import (
	"os"
	"strings"
	"testing"
)

func TestEgressFor(t *testing.T) {
	cfg := egressFixture(t)
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

func TestSecretsFor(t *testing.T) {
	cfg := egressFixture(t)
	names := func(skill string) string {
		dests, _ := cfg.EgressFor(skill)
		var out []string
		for _, s := range cfg.SecretsFor(skill, dests) {
			out = append(out, s.Name)
		}
		return strings.Join(out, " ")
	}
	// api-web reaches api.example.com; DB_PASSWORD names api-db only and
	// no rule gives it db.internal.example.net anyway.
	for skill, want := range map[string]string{"api-web": "API_TOKEN", "api-db": "API_TOKEN", "plain": "", "api-offline": ""} {
		if got := names(skill); got != want {
			t.Errorf("SecretsFor(%s) = %q, want %q", skill, got, want)
		}
	}
	s := cfg.Secrets[0]
	if s.Header != "Authorization: Bearer %s" || cfg.Secrets[1].Header != "Authorization: Bearer %s" || !strings.HasSuffix(cfg.Secrets[1].FromFile, "db-password.txt") {
		t.Errorf("secrets %+v %+v", s, cfg.Secrets[1])
	}
	t.Setenv("SKILLBOX_TEST_API_TOKEN", "v1")
	if v, err := s.Value(); err != nil || v != "v1" {
		t.Errorf("Value() = %q, %v", v, err)
	}
	t.Setenv("SKILLBOX_TEST_API_TOKEN", "")
	if _, err := s.Value(); err == nil || !strings.Contains(err.Error(), `secret "API_TOKEN"`) {
		t.Errorf("missing value: %v", err)
	}
}

func egressFixture(t *testing.T) *Config {
	t.Helper()
	src, err := os.ReadFile("testdata/egress.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(src, "egress.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
