package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestMCPHostEntry(t *testing.T) {
	exe := "/opt/skill box/skillbox"
	args := []string{"mcp", "--root", `/srv/skills "team"`}
	tests := []struct {
		host string
		want string
	}{
		{"codex", "[mcp_servers.skillbox]\ncommand = \"/opt/skill box/skillbox\"\nargs = [\"mcp\", \"--root\", \"/srv/skills \\\"team\\\"\"]\n"},
		{"claude-code", ""},
		{"cursor", ""},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			got, err := mcpHostEntry(tt.host, exe, args)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != "" {
				if got != tt.want {
					t.Errorf("entry =\n%s\nwant\n%s", got, tt.want)
				}
				return
			}
			var doc struct {
				MCPServers map[string]struct {
					Type    string   `json:"type"`
					Command string   `json:"command"`
					Args    []string `json:"args"`
				} `json:"mcpServers"`
			}
			if err := json.Unmarshal([]byte(got), &doc); err != nil {
				t.Fatalf("%v\n%s", err, got)
			}
			s := doc.MCPServers["skillbox"]
			if s.Command != exe || strings.Join(s.Args, "|") != strings.Join(args, "|") {
				t.Errorf("entry = %+v", s)
			}
			if wantType := map[string]string{"claude-code": "stdio"}[tt.host]; s.Type != wantType {
				t.Errorf("type = %q, want %q", s.Type, wantType)
			}
		})
	}
	if _, err := mcpHostEntry("vim", exe, args); err == nil {
		t.Error("an unknown host should be an error")
	}
}

func TestTOMLString(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:      `"plain"`,
		`a"b\c`:      `"a\"b\\c"`,
		"tab\there":  `"tab\u0009here"`,
		"ünïcode/ok": `"ünïcode/ok"`,
	} {
		if got := tomlString(in); got != want {
			t.Errorf("tomlString(%q) = %s, want %s", in, got, want)
		}
	}
}
