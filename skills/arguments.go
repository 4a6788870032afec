package skills

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// argPlaceholder matches the argument placeholders of a skill body, in the
// ecosystem's syntax: $ARGUMENTS[N] and $N (the Nth argument, from 0) and
// $ARGUMENTS (all of them, as typed).
var argPlaceholder = regexp.MustCompile(`\$ARGUMENTS\[(\d+)\]|\$ARGUMENTS|\$(\d+)`)

// RenderArguments renders a skill body for one invocation with the
// arguments the user typed: $ARGUMENTS becomes the whole string, $N and
// $ARGUMENTS[N] the Nth argument as SplitArguments splits it (empty past the
// end). A body with no placeholder gets non-empty arguments appended on a
// line of their own ("ARGUMENTS: ..."), so they are never silently lost.
// This is the one renderer of invocation arguments; front ends (MCP prompts,
// skills.activate) call it rather than substitute on their own.
func RenderArguments(body, arguments string) string {
	if !argPlaceholder.MatchString(body) {
		if strings.TrimSpace(arguments) == "" {
			return body
		}
		return strings.TrimRight(body, "\n") + "\n\nARGUMENTS: " + arguments + "\n"
	}
	args := SplitArguments(arguments)
	return argPlaceholder.ReplaceAllStringFunc(body, func(m string) string {
		sub := argPlaceholder.FindStringSubmatch(m)
		idx := sub[1] + sub[2]
		if idx == "" {
			return arguments
		}
		n, err := strconv.Atoi(idx)
		if err != nil || n >= len(args) {
			return ""
		}
		return args[n]
	})
}

// SplitArguments splits an argument string the way a shell would, without
// expanding anything: blanks separate arguments, 'single' and "double"
// quotes group (a backslash escapes " and \ inside double quotes and any
// character outside quotes), and an unterminated quote runs to the end.
func SplitArguments(s string) []string {
	var (
		args  []string
		cur   strings.Builder
		inArg bool
		quote rune
		esc   bool
	)
	for _, r := range s {
		switch {
		case esc:
			if quote == '"' && r != '"' && r != '\\' {
				cur.WriteRune('\\')
			}
			cur.WriteRune(r)
			esc = false
		case r == '\\' && quote != '\'':
			esc, inArg = true, true
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inArg = r, true
		case unicode.IsSpace(r):
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if esc {
		cur.WriteRune('\\')
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args
}
