package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/policy"
)

func TestPrintSkillEgress(t *testing.T) {
	src, err := os.ReadFile("../../policy/testdata/egress.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(src, "egress.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for skill, wants := range map[string][]string{
		"api-db": {
			"only through the egress proxy",
			"each run asks an approver first (policy \"db\" (egress.hcl:11))",
			"api.example.com:443\tpolicy \"api\" (egress.hcl:6)",
			"10.1.2.0/24:5432\tpolicy \"db\" (egress.hcl:11)",
			"secret API_TOKEN\tadded by the proxy as \"Authorization: Bearer %s\" to HTTPS requests to api.example.com",
			"egress caps\t10 connections, 1MiB sent per run",
		},
		"api-offline": {"none: policy \"cut-off\" (egress.hcl:21) sets network = false"},
		"plain":       {"egress\tnone (no matching rule lists egress destinations)"},
	} {
		var b bytes.Buffer
		printSkill(&b, cfg, skill)
		for _, w := range wants {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s:\n%s\nwant %q", skill, b.String(), w)
			}
		}
	}
}
