package policy

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strings"
)

// NetworkTool is the pseudo-tool used to ask whether a run of a skill may
// have network access, and to require confirmation for it (confirm = ["network"]).
const NetworkTool = "network"

// Tool patterns use the ecosystem's syntax (Claude Code's permission rules):
//
//	Read                    the tool, whatever its input
//	Bash(git:*)             Bash whose command is "git" or starts with "git "
//	Bash(npm run test:*)    likewise with a multi-word prefix
//	Bash(make build)        exactly that command
//	Read(/etc/**)           a path glob on the tool's file path
//	WebFetch(domain:x.org)  a host glob on the URL
//	mcp__github             every tool of that MCP server
//	mcp__github__*, skills.*, *   '*' globs on tool names
//
// Shell commands are split on ; && || | & and newlines, respecting quotes.
// A pattern that grants (tools, allowed-tools) must match every part, and
// never matches a command with substitutions ($(...), `...`, <(...)),
// subshells, or output redirection to a file. A pattern that restricts (deny,
// confirm) matches if any part matches, and also matches whatever it cannot
// analyse. So uncertainty always falls on the safe side.

type toolPattern struct {
	raw     string
	name    string // may hold '*'
	spec    string
	hasSpec bool
}

// matchMode picks how uncertain input counts.
type matchMode int

const (
	modeGrant    matchMode = iota // all parts must match; unclear input never matches
	modeRestrict                  // any part matching is enough; unclear input matches
)

func validToolNameChars(s string, glob bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '_' || r == '.' || r == '-' || r == ':' || r == '/' || r == '@':
		case r == '*' && glob:
		default:
			return false
		}
	}
	return true
}

// parseToolPattern checks and splits "Name" or "Name(spec)".
func parseToolPattern(s string) (toolPattern, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return toolPattern{}, fmt.Errorf("empty tool pattern")
	}
	i := strings.IndexByte(s, '(')
	if i < 0 {
		if !validToolNameChars(s, true) {
			return toolPattern{}, fmt.Errorf("invalid tool pattern %q: a tool name is letters, digits and _ . - : (with * as a glob), optionally followed by (specifier)", s)
		}
		return toolPattern{raw: s, name: s}, nil
	}
	if !strings.HasSuffix(s, ")") {
		return toolPattern{}, fmt.Errorf("invalid tool pattern %q: missing \")\" at the end", s)
	}
	name, spec := s[:i], strings.TrimSpace(s[i+1:len(s)-1])
	if !validToolNameChars(name, true) {
		return toolPattern{}, fmt.Errorf("invalid tool pattern %q: bad tool name %q before \"(\"", s, name)
	}
	if spec == "" {
		return toolPattern{}, fmt.Errorf("invalid tool pattern %q: empty specifier; write %q to mean any input", s, name)
	}
	return toolPattern{raw: s, name: name, spec: spec, hasSpec: true}, nil
}

// call is one tool call being decided.
type call struct {
	tool  string
	input map[string]any
}

func newCall(tool string, input json.RawMessage) (*call, error) {
	c := &call{tool: tool, input: map[string]any{}}
	if len(strings.TrimSpace(string(input))) == 0 || string(input) == "null" {
		return c, nil
	}
	if err := json.Unmarshal(input, &c.input); err != nil {
		return nil, fmt.Errorf("tool input is not a JSON object: %v", err)
	}
	if c.input == nil {
		c.input = map[string]any{}
	}
	return c, nil
}

func (p toolPattern) matchName(tool string) bool {
	if strings.Contains(p.name, "*") {
		return globMatch(p.name, tool)
	}
	if p.name == tool {
		return true
	}
	// "mcp__server" stands for every tool of that server.
	if strings.HasPrefix(p.name, "mcp__") && strings.Count(p.name, "__") == 1 {
		return strings.HasPrefix(tool, p.name+"__")
	}
	return false
}

// match reports whether the pattern covers the call.
func (p toolPattern) match(c *call, mode matchMode) bool {
	if !p.matchName(c.tool) {
		return false
	}
	if !p.hasSpec {
		return true
	}
	kind, val, ok := c.target()
	if !ok {
		return mode == modeRestrict
	}
	switch kind {
	case kindCommand:
		return matchCommand(p.spec, val, mode)
	case kindPath:
		return matchPath(p.spec, val)
	case kindURL:
		return matchURL(p.spec, val, mode)
	}
	if prefix, ok := strings.CutSuffix(p.spec, ":*"); ok {
		return strings.HasPrefix(val, prefix)
	}
	return globMatch(p.spec, val)
}

type targetKind int

const (
	kindString targetKind = iota
	kindCommand
	kindPath
	kindURL
)

// target picks the input field a specifier is matched against.
func (c *call) target() (targetKind, string, bool) {
	get := func(keys ...string) (string, bool) {
		for _, k := range keys {
			if s, ok := c.input[k].(string); ok {
				return s, true
			}
		}
		return "", false
	}
	var kind targetKind
	var v string
	var ok bool
	switch c.tool {
	case "Bash", "skills.render_command":
		// skills.render_command(date:*): a !`command` of a skill body.
		kind = kindCommand
		v, ok = get("command")
	case "Read", "Write", "Edit", "MultiEdit":
		kind = kindPath
		v, ok = get("file_path", "path")
	case "NotebookEdit", "NotebookRead":
		kind = kindPath
		v, ok = get("notebook_path", "file_path")
	case "Glob", "Grep", "LS":
		kind = kindPath
		v, ok = get("path")
	case "skills.read", "skills.run_script":
		kind = kindPath
		v, ok = get("path")
	case "skills.run_code":
		// skills.run_code(python): the language of the code.
		v, ok = get("language")
	case "WebFetch":
		kind = kindURL
		v, ok = get("url")
	default:
		kind = kindString
		v, ok = get("command", "file_path", "path", "url")
	}
	return kind, v, ok
}

// shellPart is one simple command of a command line.
type shellPart struct {
	text   string // whitespace-normalised
	writes bool   // redirects output to a file
}

// splitShell splits a command line into simple commands. opaque is true when
// the line holds constructs whose effect cannot be judged from its text.
func splitShell(cmd string) (parts []shellPart, opaque bool) {
	var cur strings.Builder
	writes := false
	flush := func() {
		if t := strings.Join(strings.Fields(cur.String()), " "); t != "" {
			parts = append(parts, shellPart{text: t, writes: writes})
		}
		cur.Reset()
		writes = false
	}
	inS, inD, esc := false, false, false
	for i := 0; i < len(cmd); i++ {
		ch := cmd[i]
		next := byte(0)
		if i+1 < len(cmd) {
			next = cmd[i+1]
		}
		switch {
		case esc:
			esc = false
		case inS:
			if ch == '\'' {
				inS = false
			}
		case ch == '\\':
			esc = true
		case inD:
			if ch == '"' {
				inD = false
			} else if ch == '`' || (ch == '$' && next == '(') {
				return nil, true
			}
		case ch == '\'':
			inS = true
		case ch == '"':
			inD = true
		case ch == '`', ch == '$' && next == '(', ch == '(', ch == ')':
			return nil, true
		case ch == '<' || ch == '>':
			if next == '(' {
				return nil, true
			}
			if ch == '>' {
				j := i + 1
				if next == '>' || next == '|' {
					j++
				}
				if j < len(cmd) && cmd[j] == '&' {
					// 2>&1 and >&- only duplicate or close a descriptor;
					// >&word (bash: stdout and stderr to the file word)
					// writes a file.
					if !fdWord(cmd[j+1:]) {
						writes = true
					}
					cur.WriteString(cmd[i : j+1])
					i = j
					continue
				}
				if !toDevNull(strings.TrimLeft(cmd[j:], " \t")) {
					writes = true
				}
			}
		case ch == '&' && next == '>':
			writes = true
		case ch == ';' || ch == '\n':
			flush()
			continue
		case ch == '&' || ch == '|':
			if next == ch || (ch == '|' && next == '&') {
				i++
			}
			flush()
			continue
		}
		cur.WriteByte(ch)
	}
	if inS || inD || esc {
		return nil, true
	}
	flush()
	return parts, false
}

// fdWord reports whether the word after ">&" names a descriptor (digits)
// or closes one ("-"), rather than a file.
func fdWord(rest string) bool {
	end := strings.IndexAny(rest, " \t\n;&|)")
	if end < 0 {
		end = len(rest)
	}
	w := rest[:end]
	if w == "-" {
		return true
	}
	if w == "" {
		return false
	}
	for _, r := range w {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// toDevNull reports whether a redirection target is exactly /dev/null, not
// merely a path that starts with it (/dev/nullx, /dev/null/../../etc/x).
func toDevNull(rest string) bool {
	after, ok := strings.CutPrefix(rest, "/dev/null")
	return ok && (after == "" || strings.ContainsRune(" \t\n;&|)", rune(after[0])))
}

// matchCommand matches a Bash specifier against a command line.
func matchCommand(spec, cmd string, mode matchMode) bool {
	parts, opaque := splitShell(cmd)
	if opaque {
		return mode == modeRestrict
	}
	if len(parts) == 0 {
		return false
	}
	spec = strings.Join(strings.Fields(spec), " ")
	prefix, isPrefix := strings.CutSuffix(spec, ":*")
	prefix = strings.TrimSpace(prefix)
	one := func(s string) bool {
		switch {
		case isPrefix:
			return s == prefix || strings.HasPrefix(s, prefix+" ")
		case strings.Contains(spec, "*"):
			return globMatch(spec, s)
		default:
			return s == spec
		}
	}
	if mode == modeGrant {
		for _, p := range parts {
			if p.writes || !one(p.text) {
				return false
			}
		}
		return true
	}
	for _, p := range parts {
		bare, opaque := stripCommandNoise(p.text)
		if opaque || one(p.text) || one(bare) {
			return true
		}
	}
	return false
}

// Words that run the rest of their command line as a command.
var commandWrappers = map[string]bool{
	"env": true, "command": true, "exec": true, "builtin": true, "nohup": true,
	"nice": true, "time": true, "timeout": true, "stdbuf": true, "sudo": true, "doas": true, "xargs": true,
}

// Shells whose -c argument is a command line of its own.
var nestedShells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "busybox": true}

// stripCommandNoise reduces one command to what a deny or confirm pattern
// should see: leading VAR=value assignments, quoting and backslashes in the
// command word, its directory, and wrappers such as env, command, exec,
// nohup or timeout (with their options) are dropped, so 'rm', /bin/rm,
// r\m and env rm all read as rm. A nested shell (sh -c ...) cannot be
// analysed; opaque says so, and a restricting pattern then counts as a match.
// This is best effort: deny lists over shell commands narrow, they do not
// sandbox; the sandbox is the runtime's job.
func stripCommandNoise(s string) (bare string, opaque bool) {
	f := strings.Fields(s)
	for guard := 0; len(f) > 0 && guard < 16; guard++ {
		if strings.Contains(f[0], "=") && !strings.HasPrefix(f[0], "=") {
			f = f[1:]
			continue
		}
		w := path.Base(strings.NewReplacer("'", "", `"`, "", `\`, "").Replace(f[0]))
		f[0] = w
		switch {
		case nestedShells[w]:
			return "", true
		case commandWrappers[w]:
			f = f[1:]
			for len(f) > 0 && strings.HasPrefix(f[0], "-") {
				f = f[1:]
			}
			if w == "timeout" && len(f) > 0 {
				f = f[1:] // the duration
			}
			continue
		}
		break
	}
	if len(f) == 0 {
		return "", false
	}
	return strings.Join(f, " "), false
}

// matchPath matches a path glob where '*' stays within one path element and
// '**' spans any number of them.
func matchPath(spec, p string) bool {
	if p == "" {
		return false
	}
	return globPath(strings.Split(path.Clean(spec), "/"), strings.Split(path.Clean(p), "/"))
}

func globPath(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if globPath(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], name[0]); err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// matchURL handles WebFetch(domain:HOST-GLOB) and otherwise globs the URL.
func matchURL(spec, raw string, mode matchMode) bool {
	host, ok := strings.CutPrefix(spec, "domain:")
	if !ok {
		return globMatch(spec, raw)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return mode == modeRestrict
	}
	return globMatch(strings.ToLower(host), strings.ToLower(u.Hostname()))
}

// globMatch matches s against a pattern whose only metacharacter is '*'
// (any run of characters, including none).
func globMatch(pattern, s string) bool {
	px, sx := 0, 0
	starP, starS := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && pattern[px] == '*':
			starP, starS = px, sx
			px++
		case px < len(pattern) && pattern[px] == s[sx]:
			px++
			sx++
		case starP >= 0:
			px = starP + 1
			starS++
			sx = starS
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// firstMatch returns the first pattern covering the call.
func firstMatch(pats []toolPattern, c *call, mode matchMode) (toolPattern, bool) {
	for _, p := range pats {
		if (p.name == NetworkTool || p.name == WorkspaceTool) && !p.hasSpec {
			continue // the pseudo-tools are only decided by their own rules
		}
		if p.match(c, mode) {
			return p, true
		}
	}
	return toolPattern{}, false
}
