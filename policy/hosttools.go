package policy

import (
	"fmt"
	"strings"
)

// What a skill's allowed-tools means to skillbox.
//
// Skills are written for agent hosts, and their allowed-tools name the
// host's tools: "Read Write Edit Bash" is common. In those hosts the field
// pre-approves tools and forbids nothing, and Bash is the very tool the
// host runs a skill's scripts with. skillbox runs those scripts itself, as
// skills.run_script, so under tool_mode "restrict" a list that names the
// host's shell must let the skill run its own scripts, or restrict would
// refuse exactly what the author asked for. hostTools is the one table
// that says which host names stand for which of skillbox's tools.
//
// The mapping only ever widens what the skill's own list covers, and only
// within what policy allows: a policy deny or confirm still stands.

// skillbox's own tools a skill's allowed-tools can cover.
const (
	toolRead          = "skills.read"
	toolRunScript     = "skills.run_script"
	toolRunCode       = "skills.run_code"
	toolRenderCommand = "skills.render_command"
)

// skillboxTools are the tools of skillbox a policy decision gates per call.
var skillboxTools = []string{toolRead, toolRunScript, toolRunCode, toolRenderCommand}

// hostTool is one row of the mapping: host tool names and what they let a
// skill call in skillbox.
type hostTool struct {
	// names as hosts spell them; compared ignoring case.
	names []string
	// grants are the skillbox tools an entry with one of these names
	// covers, whatever its specifier: the specifier speaks of the host's
	// command lines or paths, which skillbox's tools do not have.
	grants []string
	// renders: the entry also covers skills.render_command (a !`command`
	// of the skill's body) with its own specifier, which is a command
	// pattern there as it is for the host's shell.
	renders bool
	// kind and note explain the row (policy check, the docs).
	kind EntryKind
	note string
}

// hostTools is the mapping from host tool names to skillbox's tools. Names
// not listed here (WebFetch, Task, mcp__x__y, ...) map to nothing: they
// are not skillbox tools, only tools.check of the host's own calls sees them.
var hostTools = []hostTool{{
	// The host's shell runs a skill's scripts (python scripts/x.py,
	// ./scripts/y.sh) and any code a model writes, so it stands for both
	// of skillbox's run tools. Bash(python:*), Bash(./scripts/*) and
	// Bash(git:*) all say "this skill runs commands": the skill's own
	// scripts and code run sandboxed whatever the pattern.
	names:   []string{"Bash", "Shell", "run_shell_command"},
	grants:  []string{toolRunScript, toolRunCode},
	renders: true,
	kind:    EntryHostShell,
	note:    "the host's shell tool, with which hosts run a skill's scripts: the skill may run its own scripts and code",
}, {
	// Reading and searching files: skillbox's counterpart reads the
	// skill's own files.
	names:  []string{"Read", "Glob", "Grep", "LS", "NotebookRead", "read_file", "read_many_files", "list_directory", "search_file_content"},
	grants: []string{toolRead},
	kind:   EntryHostRead,
	note:   "the host's file reading tool: the skill may read its own files",
}, {
	// File edits are the host's: a sandboxed script writes only in its
	// workspace, which no tool call gates, so these cover nothing of
	// skillbox's and never cause a refusal.
	names: []string{"Write", "Edit", "MultiEdit", "NotebookEdit", "write_file", "replace"},
	kind:  EntryHostWrite,
	note:  "the host's file editing tool; skillbox gates no such tool (a script writes only in its workspace), so it refuses nothing",
}}

// skillboxMCPNames are skillbox's tool names over MCP (skills_run_script),
// also as a host prefixes them with its server name
// (mcp__skillbox__skills_run_script, whatever the server is called).
var skillboxMCPNames = map[string]string{
	"skills_read":       toolRead,
	"skills_run_script": toolRunScript,
	"skills_run_code":   toolRunCode,
}

// EntryKind classifies one entry of a skill's allowed-tools.
type EntryKind string

const (
	// EntrySkillbox: one of skillbox's own tool names or a pattern over
	// them (skills.run_script, skills_run_script, skills.*, *).
	EntrySkillbox EntryKind = "skillbox"
	// EntryHostShell: the host's shell (Bash, Bash(git:*), shell).
	EntryHostShell EntryKind = "host shell"
	// EntryHostRead: a host tool that reads files (Read, Glob, Grep).
	EntryHostRead EntryKind = "host read"
	// EntryHostWrite: a host tool that edits files (Write, Edit): no
	// skillbox tool.
	EntryHostWrite EntryKind = "host write"
	// EntryOther: not a skillbox tool (WebFetch, Task, mcp__x__y); it
	// only narrows the host's own calls in tools.check.
	EntryOther EntryKind = "not a skillbox tool"
	// EntryInvalid: not a tool pattern at all; it covers nothing.
	EntryInvalid EntryKind = "invalid"
)

// AllowedEntry is what one entry of a skill's allowed-tools means.
type AllowedEntry struct {
	Entry string    `json:"entry"` // as the skill wrote it
	Kind  EntryKind `json:"kind"`
	// Covers are the skillbox tools the entry lets the skill call under
	// restrict, with a specifier where it narrows the input
	// (skills.render_command(git:*)); empty when it covers none.
	Covers []string `json:"covers,omitempty"`
	Note   string   `json:"note"`

	pats []toolPattern // what Decide matches: the entry itself, then its mapping
}

// ExplainAllowedTools says, entry by entry, what a skill's allowed-tools
// means to skillbox. It never fails: an entry it cannot read is listed as
// invalid, covering nothing.
func ExplainAllowedTools(list []string) []AllowedEntry {
	out := make([]AllowedEntry, 0, len(list))
	for _, s := range list {
		out = append(out, explainEntry(s))
	}
	return out
}

func explainEntry(s string) AllowedEntry {
	e := AllowedEntry{Entry: s}
	p, err := parseToolPattern(s)
	if err != nil {
		e.Kind, e.Note = EntryInvalid, err.Error()+"; ignored"
		return e
	}
	e.pats = []toolPattern{p}
	if strings.Contains(p.name, "*") || strings.HasPrefix(p.name, "skills.") {
		// skillbox's own names, and globs, which may cover them.
		for _, t := range skillboxTools {
			if p.matchName(t) {
				e.Covers = append(e.Covers, p.withName(t).String())
			}
		}
		switch {
		case len(e.Covers) > 0 && strings.Contains(p.name, "*"):
			e.Kind, e.Note = EntrySkillbox, "a tool name pattern that covers skillbox's tools"
			return e
		case len(e.Covers) > 0:
			e.Kind, e.Note = EntrySkillbox, "skillbox's own tool name"
			return e
		case strings.HasPrefix(p.name, "skills."):
			e.Kind, e.Note = EntrySkillbox, "a skillbox tool no decision gates"
			return e
		}
	}
	if t, ok := mcpSkillboxName(p.name); ok {
		e.Kind, e.Note = EntrySkillbox, fmt.Sprintf("skillbox's MCP name for %s", t)
		q := toolPattern{raw: p.raw, name: t}
		e.pats = append(e.pats, q)
		e.Covers = []string{t}
		return e
	}
	if ht := lookupHostTool(p.name); ht != nil {
		e.Kind, e.Note = ht.kind, ht.note
		for _, t := range ht.grants {
			e.pats = append(e.pats, toolPattern{raw: p.raw, name: t})
			e.Covers = append(e.Covers, t)
		}
		if ht.renders {
			q := p.withName(toolRenderCommand)
			e.pats = append(e.pats, q)
			e.Covers = append(e.Covers, q.String())
		}
		return e
	}
	e.Kind, e.Note = EntryOther, "ignored here; tools.check still matches it against the host's own calls"
	return e
}

// lookupHostTool finds name's row of hostTools, ignoring case.
func lookupHostTool(name string) *hostTool {
	for i := range hostTools {
		for _, n := range hostTools[i].names {
			if strings.EqualFold(n, name) {
				return &hostTools[i]
			}
		}
	}
	return nil
}

// mcpSkillboxName maps skills_run_script and mcp__SERVER__skills_run_script
// to skills.run_script (likewise for the other tools).
func mcpSkillboxName(name string) (string, bool) {
	if rest, ok := strings.CutPrefix(name, "mcp__"); ok {
		i := strings.Index(rest, "__")
		if i <= 0 {
			return "", false
		}
		name = rest[i+2:]
	}
	t, ok := skillboxMCPNames[name]
	return t, ok
}

// withName is the pattern with another tool name and the same specifier.
func (p toolPattern) withName(name string) toolPattern {
	q := p
	q.name = name
	return q
}

// String renders the pattern as Name or Name(spec).
func (p toolPattern) String() string {
	if !p.hasSpec {
		return p.name
	}
	return p.name + "(" + p.spec + ")"
}

// allowedPatterns are the patterns a skill's allowed-tools grants with:
// each entry as written, and what it maps to. raw stays the entry, so a
// decision names what the skill wrote.
func allowedPatterns(list []string) []toolPattern {
	var pats []toolPattern
	for _, e := range ExplainAllowedTools(list) {
		pats = append(pats, e.pats...)
	}
	return pats
}

// suggestEntry is the smallest allowed-tools entry, in the host's terms
// where a host tool covers it, that would cover a call: "Bash or
// skills.run_script".
func suggestEntry(cl *call) string {
	switch cl.tool {
	case toolRunScript, toolRunCode:
		return "Bash or " + cl.tool
	case toolRead:
		return "Read or " + cl.tool
	case toolRenderCommand, "Bash":
		if w := firstWord(cl); w != "" {
			return fmt.Sprintf("Bash(%s:*)", w)
		}
		return "Bash"
	}
	return cl.tool
}

// firstWord is a command call's first word ("" when it has none or the
// word would not fit a pattern).
func firstWord(cl *call) string {
	cmd, _ := cl.input["command"].(string)
	f := strings.Fields(cmd)
	if len(f) == 0 || strings.ContainsAny(f[0], "()*'\"`$;&|<>") {
		return ""
	}
	return f[0]
}

// policyEntry is the smallest entry of a policy block's tools that would
// allow a call.
func policyEntry(cl *call) string {
	switch cl.tool {
	case toolRenderCommand, "Bash":
		if w := firstWord(cl); w != "" {
			return fmt.Sprintf("%s(%s:*)", cl.tool, w)
		}
	case toolRunCode:
		if l, _ := cl.input["language"].(string); l != "" && validToolNameChars(l, false) {
			return fmt.Sprintf("%s(%s)", cl.tool, l)
		}
	}
	return cl.tool
}
