package skills

import (
	"strings"
	"testing"
	"time"
)

func hooksOf(t testing.TB, yaml string) (Hooks, []string) {
	t.Helper()
	doc, err := Parse([]byte("---\nname: h\ndescription: d\nhooks:\n" + yaml + "---\nbody\n"))
	if err != nil {
		t.Skipf("not YAML: %v", err)
	}
	return ParseHooks(doc.Frontmatter["hooks"])
}

func TestParseHooks(t *testing.T) {
	good := `  PreToolUse:
    - matcher: Bash
      hooks:
        - type: command
          command: ./scripts/guard.sh
          timeout: 5
    - matcher: "Edit|Write"
      hooks:
        - type: command
          command: echo ok
  PostToolUse:
    - hooks:
        - type: command
          command: ./scripts/after.sh
`
	h, probs := hooksOf(t, good)
	if len(probs) != 0 {
		t.Fatalf("problems: %v", probs)
	}
	for _, tc := range []struct {
		event, tool string
		want        []string
	}{
		{HookPreToolUse, "Bash", []string{"./scripts/guard.sh"}},
		{HookPreToolUse, "Write", []string{"echo ok"}},
		{HookPreToolUse, "Bash2", nil}, // the matcher is anchored
		{HookPreToolUse, "Read", nil},
		{HookPostToolUse, "anything", []string{"./scripts/after.sh"}},
	} {
		var got []string
		for _, c := range h.Matching(tc.event, tc.tool) {
			got = append(got, c.Command)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("Matching(%s, %s) = %v, want %v", tc.event, tc.tool, got, tc.want)
		}
	}
	if c := h.Matching(HookPreToolUse, "Bash")[0]; c.Timeout != 5*time.Second {
		t.Errorf("timeout %v", c.Timeout)
	}

	for _, tc := range []struct{ yaml, want string }{
		{"  Bogus:\n    - hooks: [{type: command, command: x}]\n", "not a hook event"},
		{"  PreToolUse: 3\n", "must be a list"},
		{"  PreToolUse:\n    - matcher: \"(\"\n      hooks: [{type: command, command: x}]\n", "not a valid regular expression"},
		{"  PreToolUse:\n    - matcher: Bash\n", "non-empty list"},
		{"  PreToolUse:\n    - hooks: [{type: prompt, command: x}]\n", "type must be \"command\""},
		{"  PreToolUse:\n    - hooks: [{type: command}]\n", "non-empty shell command"},
		{"  PreToolUse:\n    - hooks: [{type: command, command: x, timeout: 0}]\n", "timeout must be more than 0"},
		{"  PreToolUse:\n    - hooks: [{type: command, command: x, timeout: 100000}]\n", "at most"},
		{"  PreToolUse:\n    - hooks: [{type: command, command: x, extra: 1}]\n", "unknown key"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			h, probs := hooksOf(t, tc.yaml)
			if h != nil || !strings.Contains(strings.Join(probs, "; "), tc.want) {
				t.Errorf("hooks %v, problems %v; want one naming %q", h, probs, tc.want)
			}
		})
	}
}

func FuzzParseHooks(f *testing.F) {
	f.Add("  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - type: command\n          command: ./x.sh\n")
	f.Add("  PostToolUse: [{hooks: [{type: command, command: y, timeout: 1.5}]}]\n")
	f.Fuzz(func(t *testing.T, yaml string) {
		h, probs := hooksOf(t, yaml)
		if h != nil && len(probs) > 0 {
			t.Fatalf("hooks returned with problems: %v", probs)
		}
		for _, ms := range h {
			for _, m := range ms {
				m.Matches("Bash")
			}
		}
	})
}
