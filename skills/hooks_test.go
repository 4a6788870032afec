package skills

import (
	"reflect"
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

func TestHookScript(t *testing.T) {
	for _, tc := range []struct {
		command, path string
		args          []string
	}{
		{"./scripts/check.sh", "scripts/check.sh", []string{}},
		{"scripts/check.sh --strict 'a b'", "scripts/check.sh", []string{"--strict", "a b"}},
		{`python3 hooks/guard.py "x y"`, "hooks/guard.py", []string{"x y"}},
		{"sh check.sh", "check.sh", []string{}},
		{"node ./a/../b.js", "", nil},                     // ".." is never a skill file
		{"check.sh", "", nil},                             // a bare name is found in PATH
		{"echo hi", "", nil},                              // a program, not a file of the skill
		{"./x.sh && ./y.sh", "", nil},                     // operators
		{"./x.sh; rm -rf /", "", nil},                     // operators
		{"./x.sh > out", "", nil},                         // redirection
		{"./x.sh $(id)", "", nil},                         // substitution
		{`./x.sh "$HOME"`, "", nil},                       // expansion in quotes
		{"./x.sh *", "", nil},                             // glob
		{"X=a/b ./x.sh", "", nil},                         // assignment
		{"/skill/x.sh", "", nil},                          // absolute
		{"sh -c ./x.sh", "", nil},                         // an option before the script
		{"sh", "", nil},                                   // no script
		{"./x.sh\n./deploy.sh", "", nil},                  // two lines
		{"'./x.sh", "", nil},                              // unterminated quote
		{"./x.sh ~", "", nil},                             // tilde
		{"./x.sh # comment", "", nil},                     // comment
		{"./", "", nil},                                   // the skill directory
		{"./x.sh 'it''s'", "x.sh", []string{"its"}},       // adjacent quotes join
		{"bash   ./x.sh\t-v", "x.sh", []string{"-v"}},     // blanks
		{"./sub/x.sh a=b", "sub/x.sh", []string{"a=b"}},   // = in an argument
		{`./x.sh "a\"b"`, "", nil},                        // backslash in double quotes
		{"./x.sh {a,b}", "", nil},                         // brace expansion
		{"./x.sh `id`", "", nil},                          // backquotes
		{"./x.sh <in", "", nil},                           // input redirection
		{"./x.sh & ./y.sh", "", nil},                      // background
		{"./x.sh | sh", "", nil},                          // pipe
		{"(./x.sh)", "", nil},                             // subshell
		{"./x.sh !", "", nil},                             // history/negation
		{"python3 -m http.server", "", nil},               // a module, not a file
		{"'' ./x.sh", "", nil},                            // an empty program name
		{"./x.sh\\ y", "", nil},                           // escapes
		{"./x.sh $IFS", "", nil},                          // a variable
		{"./x.sh a\x00", "", nil},                         // NUL
		{"./x.sh ä", "", nil},                             // non-ASCII
		{"./x.sh ,:@%+", "x.sh", []string{",:@%+"}},       // the safe set
		{"'./x y.sh' a", "x y.sh", []string{"a"}},         // a quoted path
		{"./x.sh \"\"", "x.sh", []string{""}},             // an empty argument
		{"./x.sh ''", "x.sh", []string{""}},               // likewise
		{"sh ''", "", nil},                                // an empty script name
		{"./.hidden/x.sh", ".hidden/x.sh", []string{}},    // dot directories
		{".//x.sh", "x.sh", []string{}},                   // doubled slashes
		{"../x.sh", "", nil},                              // outside the skill
		{"./x/..", "", nil},                               // outside via the end
		{"node x.js", "x.js", []string{}},                 // node
		{"python x.py", "x.py", []string{}},               // python
		{"bash -- x.sh", "", nil},                         // an option
		{"perl x.pl", "", nil},                            // not an interpreter skillbox knows
		{"./x.sh\r", "", nil},                             // CR
		{"", "", nil},                                     // empty
		{"   ", "", nil},                                  // blank
		{"./x.sh 'a\nb'", "x.sh", []string{"a\nb"}},       // a newline inside single quotes is data
		{"./x.sh \"a;b\"", "x.sh", []string{"a;b"}},       // operators inside quotes are data
		{"./x.sh 'a $b'", "x.sh", []string{"a $b"}},       // no expansion in single quotes
		{"./x.sh=y", "", nil},                             // = in the program word
		{"./-x.sh", "-x.sh", []string{}},                  // a dash after ./ is a path
		{"sh ./-x.sh", "-x.sh", []string{}},               // likewise for an interpreter
		{"sh -x.sh", "", nil},                             // an option for an interpreter
		{"./x.sh 'unterminated", "", nil},                 // unterminated quote
		{"./x.sh \"unterminated", "", nil},                // unterminated double quote
		{"./x.sh '\"'", "x.sh", []string{`"`}},            // a double quote as data
		{"./x.sh \"'\"", "x.sh", []string{`'`}},           // a single quote as data
		{"./x.sh a'b'c", "x.sh", []string{"abc"}},         // quotes inside a word
		{"./x.sh a\"b\"c", "x.sh", []string{"abc"}},       // likewise
		{"./x.sh a b c", "x.sh", []string{"a", "b", "c"}}, // args
	} {
		t.Run(tc.command, func(t *testing.T) {
			sc, ok := HookCommand{Type: "command", Command: tc.command}.Script()
			if ok != (tc.path != "") || sc.Path != tc.path || (ok && !reflect.DeepEqual(sc.Args, tc.args)) {
				t.Errorf("Script() = %+v, %v; want path %q args %q", sc, ok, tc.path, tc.args)
			}
		})
	}
}

// FuzzHookScript checks that what Script calls a script never hides shell
// syntax: its words joined back contain none of the shell's operators
// outside the arguments, and the path stays inside the skill.
func FuzzHookScript(f *testing.F) {
	for _, s := range []string{"./x.sh a 'b c'", "sh x.sh", "./x.sh && y", `python3 "a b.py"`, "X=1 ./y", "../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		sc, ok := HookCommand{Type: "command", Command: cmd}.Script()
		if !ok {
			return
		}
		if sc.Path == "" || strings.HasPrefix(sc.Path, "/") || sc.Path == ".." || strings.HasPrefix(sc.Path, "../") || strings.Contains(sc.Path, "/../") || strings.HasSuffix(sc.Path, "/..") {
			t.Fatalf("%q: path %q escapes the skill", cmd, sc.Path)
		}
		if strings.ContainsAny(cmd, ";&|<>()`\n\\*?[]{}~#$") && !strings.ContainsAny(cmd, `'"`) {
			t.Fatalf("%q: shell syntax taken for a plain script call", cmd)
		}
	})
}
