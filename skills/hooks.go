package skills

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Hook events a skill may declare in its hooks frontmatter, in Claude
// Code's shape. skillbox runs PreToolUse (tools.check) and PostToolUse
// (tools.report); the others are accepted so a skill written for a host
// still validates, and are never run.
const (
	HookPreToolUse  = "PreToolUse"
	HookPostToolUse = "PostToolUse"
)

// HookEvents are the event names the hooks field may use.
var HookEvents = []string{HookPreToolUse, HookPostToolUse, "PostToolUseFailure", "PermissionRequest", "UserPromptSubmit",
	"Notification", "Stop", "SubagentStart", "SubagentStop", "PreCompact", "SessionStart", "SessionEnd"}

// MaxHookTimeout caps what a hook may ask for as its timeout.
const MaxHookTimeout = 10 * time.Minute

// Hooks are a skill's hooks by event, in file order.
type Hooks map[string][]HookMatcher

// HookMatcher is one entry of an event: which tools it applies to and the
// commands it runs.
type HookMatcher struct {
	// Matcher is as written: "" or "*" matches every tool, otherwise a
	// regular expression that must match the whole tool name ("Bash",
	// "Edit|Write", "mcp__github__.*").
	Matcher string        `json:"matcher,omitempty"`
	Hooks   []HookCommand `json:"hooks"`

	re *regexp.Regexp
}

// HookCommand is one command hook: a shell command run with the skill
// directory as its working directory ("./scripts/check.sh" is the skill's
// own file). Timeout 0 means the policy's hook timeout.
type HookCommand struct {
	Type    string        `json:"type"`
	Command string        `json:"command"`
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Matches reports whether the matcher applies to tool.
func (m HookMatcher) Matches(tool string) bool {
	if m.Matcher == "" || m.Matcher == "*" {
		return true
	}
	if m.re == nil {
		re, err := regexp.Compile("^(?:" + m.Matcher + ")$")
		if err != nil {
			return false
		}
		m.re = re
	}
	return m.re.MatchString(tool)
}

// Matching returns the commands of event whose matcher applies to tool, in
// file order.
func (h Hooks) Matching(event, tool string) []HookCommand {
	var out []HookCommand
	for _, m := range h[event] {
		if m.Matches(tool) {
			out = append(out, m.Hooks...)
		}
	}
	return out
}

// ParseHooks checks the hooks frontmatter value and returns the hooks it
// declares. Every problem is returned (one string each, naming where).
//
//	hooks:
//	  PreToolUse:
//	    - matcher: "Bash"
//	      hooks:
//	        - type: command
//	          command: "./scripts/guard.sh"
//	          timeout: 5        # seconds
func ParseHooks(raw any) (Hooks, []string) {
	if raw == nil {
		return nil, nil
	}
	events, ok := raw.(map[string]any)
	if !ok {
		return nil, []string{"must be a mapping of hook events (PreToolUse, PostToolUse, ...) to lists of matchers"}
	}
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	out := Hooks{}
	names := make([]string, 0, len(events))
	for ev := range events {
		names = append(names, ev)
	}
	sort.Strings(names)
	for _, ev := range names {
		if !slices.Contains(HookEvents, ev) {
			bad("event %q is not a hook event; use one of %s", ev, strings.Join(HookEvents, ", "))
			continue
		}
		list, ok := events[ev].([]any)
		if !ok {
			bad("%s must be a list of {matcher, hooks} entries", ev)
			continue
		}
		for i, item := range list {
			at := fmt.Sprintf("%s[%d]", ev, i)
			m, ok := item.(map[string]any)
			if !ok {
				bad("%s must be a mapping with matcher and hooks", at)
				continue
			}
			var hm HookMatcher
			for k := range m {
				if k != "matcher" && k != "hooks" {
					bad("%s has unknown key %q; an entry has matcher and hooks", at, k)
				}
			}
			if v, ok := m["matcher"]; ok && v != nil {
				s, ok := v.(string)
				if !ok {
					bad("%s.matcher must be a string like \"Bash\" or \"Edit|Write\"", at)
				} else if s != "" && s != "*" {
					re, err := regexp.Compile("^(?:" + s + ")$")
					if err != nil {
						bad("%s.matcher %q is not a valid regular expression: %v", at, s, err)
					}
					hm.re = re
				}
				hm.Matcher = s
			}
			cmds, ok := m["hooks"].([]any)
			if !ok || len(cmds) == 0 {
				bad("%s.hooks must be a non-empty list of {type: command, command: ...}", at)
				continue
			}
			for j, c := range cmds {
				hat := fmt.Sprintf("%s.hooks[%d]", at, j)
				cm, ok := c.(map[string]any)
				if !ok {
					bad("%s must be a mapping with type and command", hat)
					continue
				}
				var hc HookCommand
				for k := range cm {
					if k != "type" && k != "command" && k != "timeout" {
						bad("%s has unknown key %q; a hook has type, command and timeout", hat, k)
					}
				}
				hc.Type, _ = cm["type"].(string)
				if hc.Type != "command" {
					bad("%s.type must be \"command\" (the only kind skillbox runs, in a sandbox)", hat)
				}
				hc.Command, _ = cm["command"].(string)
				if strings.TrimSpace(hc.Command) == "" {
					bad("%s.command must be a non-empty shell command, e.g. ./scripts/check.sh", hat)
				} else if strings.ContainsRune(hc.Command, 0) {
					bad("%s.command contains a NUL byte", hat)
				}
				if t, ok := cm["timeout"]; ok {
					var secs float64
					switch x := t.(type) {
					case int64:
						secs = float64(x)
					case float64:
						secs = x
					default:
						bad("%s.timeout must be a number of seconds", hat)
					}
					if secs <= 0 || time.Duration(secs*float64(time.Second)) > MaxHookTimeout {
						bad("%s.timeout must be more than 0 and at most %d seconds", hat, int(MaxHookTimeout/time.Second))
					} else {
						hc.Timeout = time.Duration(secs * float64(time.Second))
					}
				}
				hm.Hooks = append(hm.Hooks, hc)
			}
			out[ev] = append(out[ev], hm)
		}
	}
	if len(probs) > 0 {
		return nil, probs
	}
	return out, nil
}

// HookScript is a hook command that is one plain invocation of a file of
// its skill: "./scripts/check.sh --strict" or "python3 hooks/guard.py".
// Path is relative to the skill directory (cleaned, never "..").
type HookScript struct {
	Path string
	Args []string
}

// hookInterpreters are the programs a hook may name before its script
// ("sh ./hooks/x.sh"); the script is then a file of the skill whatever its
// name, since the hook runs in the skill directory.
var hookInterpreters = map[string]bool{"sh": true, "bash": true, "python": true, "python3": true, "node": true}

// Script reports whether the command only runs a file of its skill, and
// which. Anything the words alone cannot settle (operators, expansions,
// redirections, globs, assignments, options before the script, absolute
// or ".." paths, a bare name looked up in PATH) is not a script: the
// caller must then treat the command as arbitrary shell code.
func (hc HookCommand) Script() (HookScript, bool) {
	words, ok := plainWords(hc.Command)
	if !ok || len(words) == 0 {
		return HookScript{}, false
	}
	file, args := words[0], words[1:]
	if hookInterpreters[file] {
		if len(args) == 0 {
			return HookScript{}, false
		}
		file, args = args[0], args[1:]
	} else if !strings.Contains(file, "/") || strings.Contains(file, "=") {
		// A bare name is a program from PATH; NAME=value is an assignment.
		return HookScript{}, false
	}
	if file == "" || strings.HasPrefix(file, "-") || strings.HasPrefix(file, "/") {
		return HookScript{}, false
	}
	for _, el := range strings.Split(file, "/") {
		if el == ".." {
			return HookScript{}, false
		}
	}
	clean := path.Clean(file)
	if clean == "." {
		return HookScript{}, false
	}
	if args == nil {
		args = []string{}
	}
	return HookScript{Path: clean, Args: args}, true
}

// plainWords splits a command line into words when it is nothing but
// words: unquoted characters from a small safe set, single-quoted text, and
// double-quoted text without expansions or escapes. ok is false for
// anything else.
func plainWords(cmd string) (words []string, ok bool) {
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(cmd); i++ {
		ch := cmd[i]
		switch {
		case ch == ' ' || ch == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case ch == '\'':
			j := strings.IndexByte(cmd[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			cur.WriteString(cmd[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case ch == '"':
			j := strings.IndexByte(cmd[i+1:], '"')
			if j < 0 {
				return nil, false
			}
			s := cmd[i+1 : i+1+j]
			if strings.ContainsAny(s, "$`\\!") {
				return nil, false
			}
			cur.WriteString(s)
			i += j + 1
			inWord = true
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9',
			strings.IndexByte("._-/+,:@%=", ch) >= 0:
			cur.WriteByte(ch)
			inWord = true
		default:
			return nil, false
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, true
}
