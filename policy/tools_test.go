package policy

import (
	"testing"
)

func TestToolPatternMatch(t *testing.T) {
	cases := []struct {
		pattern string
		tool    string
		input   string
		grant   bool // modeGrant result
		restr   bool // modeRestrict result
	}{
		{"Read", "Read", `{"file_path": "/etc/passwd"}`, true, true},
		{"Read", "ReadX", ``, false, false},
		{"*", "anything.at_all", ``, true, true},
		{"skills.*", "skills.run_script", ``, true, true},
		{"skills.*", "skillsXrun", ``, false, false},
		{"skills.run_code(python)", "skills.run_code", `{"language": "python"}`, true, true},
		{"skills.run_code(python)", "skills.run_code", `{"language": "node"}`, false, false},
		{"skills.run_code(python)", "skills.run_code", `{}`, false, true},
		{"mcp__gh", "mcp__gh__issue", ``, true, true},
		{"mcp__gh", "mcp__ghost__issue", ``, false, false},
		{"mcp__*__search", "mcp__docs__search", ``, true, true},
		{"Bash(git:*)", "Bash", `{"command": "git status"}`, true, true},
		{"Bash(git:*)", "Bash", `{"command": "git"}`, true, true},
		{"Bash(git:*)", "Bash", `{"command": "gitx status"}`, false, false},
		{"Bash(git:*)", "Bash", `{"command": "git status | less"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "echo hi; git status"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "echo 'git status'"}`, false, false},
		{"Bash(git:*)", "Bash", `{"command": "git log \"$(id)\""}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "git log 'x $(id)'"}`, true, true},
		{"Bash(git:*)", "Bash", `{"command": "git log >> out"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "git log &> out"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "git log >&out"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "git log >& /tmp/x"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "git log 2>&1"}`, true, true},
		{"Bash(git:*)", "Bash", `{"command": "git log >&2"}`, true, true},
		{"Bash(git:*)", "Bash", `{"command": "git log 2>&-"}`, true, true},
		{"Bash(git:*)", "Bash", `{"command": "git log > /dev/null"}`, true, true},
		{"Bash(git:*)", "Bash", `{"command": "git log >/dev/null; git status"}`, true, true},
		{"Bash(git:*)", "Bash", `{"command": "git log >/dev/nullx"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "git log >/dev/null/../../etc/x"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "git log & rm x"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "(git status)"}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": "git 'unterminated"}`, false, true},
		{"Bash(git:*)", "Bash", `{}`, false, true},
		{"Bash(git:*)", "Bash", `{"command": ""}`, false, false},
		{"Bash(rm:*)", "Bash", `{"command": "X=1 /bin/rm -rf /"}`, false, true},
		{"Bash(rm:*)", "Bash", `{"command": "'rm' -rf /"}`, false, true},
		{"Bash(rm:*)", "Bash", `{"command": "r\\m -rf /"}`, false, true},
		{"Bash(rm:*)", "Bash", `{"command": "env -i X=1 rm -rf /"}`, false, true},
		{"Bash(rm:*)", "Bash", `{"command": "command rm x"}`, false, true},
		{"Bash(rm:*)", "Bash", `{"command": "nohup timeout 5 /usr/bin/rm x"}`, false, true},
		{"Bash(rm:*)", "Bash", `{"command": "sh -c 'echo hi'"}`, false, true},
		{"Bash(rm:*)", "Bash", `{"command": "ls -l"}`, false, false},
		{"Bash(rm:*)", "Bash", `{"command": "env ls"}`, false, false},
		{"Bash(npm run test:*)", "Bash", `{"command": "npm run test"}`, true, true},
		{"Bash(npm run test:*)", "Bash", `{"command": "npm run test --coverage"}`, true, true},
		{"Bash(npm run test:*)", "Bash", `{"command": "npm run build"}`, false, false},
		{"Bash(make *)", "Bash", `{"command": "make all"}`, true, true},
		{"Bash(make build)", "Bash", `{"command": "make build"}`, true, true},
		{"Bash(make build)", "Bash", `{"command": "make build2"}`, false, false},
		{"Read(src/**)", "Read", `{"file_path": "src/a/b.go"}`, true, true},
		{"Read(src/**)", "Read", `{"file_path": "./src/x"}`, true, true},
		{"Read(src/*)", "Read", `{"file_path": "src/a/b.go"}`, false, false},
		{"Read(src/**)", "Read", `{"file_path": "src/../etc/passwd"}`, false, false},
		{"Read(/etc/**)", "Read", `{"file_path": "/etc/ssh/sshd_config"}`, true, true},
		{"Read(**/*.env)", "Read", `{"file_path": "app/.env"}`, true, true},
		{"Read(**/.env)", "Read", `{"file_path": "app/.env"}`, true, true},
		{"skills.run_script(scripts/*.py)", "skills.run_script", `{"path": "scripts/a.py"}`, true, true},
		{"WebFetch(domain:example.com)", "WebFetch", `{"url": "https://example.com/a"}`, true, true},
		{"WebFetch(domain:example.com)", "WebFetch", `{"url": "https://www.example.com/a"}`, false, false},
		{"WebFetch(domain:*.example.com)", "WebFetch", `{"url": "https://www.example.com/a"}`, true, true},
		{"WebFetch(domain:example.com)", "WebFetch", `{"url": "::bad"}`, false, true},
		{"mcp__db__query(SELECT:*)", "mcp__db__query", `{"command": "SELECT 1"}`, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.pattern+" "+tc.tool+" "+tc.input, func(t *testing.T) {
			p, err := parseToolPattern(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			c, err := newCall(tc.tool, []byte(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			if got := p.match(c, modeGrant); got != tc.grant {
				t.Errorf("grant: got %v, want %v", got, tc.grant)
			}
			if got := p.match(c, modeRestrict); got != tc.restr {
				t.Errorf("restrict: got %v, want %v", got, tc.restr)
			}
		})
	}
}

func TestParseToolPatternErrors(t *testing.T) {
	for _, s := range []string{"", "Bash(", "Bash()", "(x)", "Ba sh", "Bash(x)y", "Read!"} {
		if _, err := parseToolPattern(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	for _, s := range []string{"Read", "Bash(git:*)", "Bash(npm run test:*)", "mcp__server__tool", "skills.run_script", "*", "Bash(echo (x))"} {
		if _, err := parseToolPattern(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"a*c", "abbbc", true}, {"a*c", "abbbd", false},
		{"*a*b*", "xxaxxbxx", true}, {"ab", "ab", true}, {"ab", "abc", false}, {"**", "x", true},
	} {
		if got := globMatch(tc.p, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.p, tc.s, got)
		}
	}
}
