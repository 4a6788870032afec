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

// bodyToken matches everything Render substitutes in one pass: a
// !`command` (group 1), the argument placeholders (groups 2 and 3) and the
// skill directory placeholders ${SKILL_DIR} and ${CLAUDE_SKILL_DIR}.
var bodyToken = regexp.MustCompile("!`([^`\n]+)`|\\$ARGUMENTS\\[(\\d+)\\]|\\$ARGUMENTS|\\$(\\d+)|\\$\\{(?:CLAUDE_)?SKILL_DIR\\}")

// commandToken matches one !`command` of a body.
var commandToken = regexp.MustCompile("!`([^`\n]+)`")

// Invocation is what one invocation of a skill fills into its body.
type Invocation struct {
	// Arguments is what the user typed after the skill's name.
	Arguments string
	// SkillDir replaces ${SKILL_DIR} and ${CLAUDE_SKILL_DIR} in the body;
	// "" leaves them as written.
	SkillDir string
	// CommandSkillDir replaces them inside a !`command` (where the command
	// runs, e.g. the sandbox's skill mount); "" uses SkillDir.
	CommandSkillDir string
	// Run, when set, runs each !`command` (its text already rendered) and
	// returns what replaces it; nil leaves commands as written.
	Run func(command string) string
}

// RenderArguments renders a skill body for one invocation with the
// arguments the user typed: $ARGUMENTS becomes the whole string, $N and
// $ARGUMENTS[N] the Nth argument as SplitArguments splits it (empty past the
// end). A body with no placeholder gets non-empty arguments appended on a
// line of their own ("ARGUMENTS: ..."), so they are never silently lost.
// It is Render without a skill directory or commands.
func RenderArguments(body, arguments string) string {
	return Render(body, Invocation{Arguments: arguments})
}

// Render renders a skill body for one invocation: the argument rules of
// RenderArguments, ${SKILL_DIR} / ${CLAUDE_SKILL_DIR}, and each !`command`
// replaced by what inv.Run returns for it (the command's own placeholders
// rendered first). Everything is substituted in one pass, so nothing an
// argument or a command's output contains is substituted again. This is
// the one renderer of skill bodies; front ends (MCP prompts,
// skills.activate) call it rather than substitute on their own.
func Render(body string, inv Invocation) string {
	hasArgs := argPlaceholder.MatchString(body)
	args := SplitArguments(inv.Arguments)
	cmdDir := inv.CommandSkillDir
	if cmdDir == "" {
		cmdDir = inv.SkillDir
	}
	var sub func(text, dir string, commands bool) string
	sub = func(text, dir string, commands bool) string {
		return bodyToken.ReplaceAllStringFunc(text, func(m string) string {
			g := bodyToken.FindStringSubmatch(m)
			switch {
			case strings.HasPrefix(m, "!`"):
				if !commands || inv.Run == nil {
					return m
				}
				return inv.Run(sub(g[1], cmdDir, false))
			case strings.HasPrefix(m, "${"):
				if dir == "" {
					return m
				}
				return dir
			case g[2]+g[3] == "":
				return inv.Arguments
			}
			n, err := strconv.Atoi(g[2] + g[3])
			if err != nil || n >= len(args) {
				return ""
			}
			return args[n]
		})
	}
	out := sub(body, inv.SkillDir, true)
	if !hasArgs && strings.TrimSpace(inv.Arguments) != "" {
		out = strings.TrimRight(out, "\n") + "\n\nARGUMENTS: " + inv.Arguments + "\n"
	}
	return out
}

// Commands returns the !`command`s of a body as written, in order.
func Commands(body string) []string {
	var out []string
	for _, m := range commandToken.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
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
