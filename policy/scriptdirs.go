package policy

import (
	"path"
	"strings"
)

// Which files of a skill may be run is policy, not convention: the Agent
// Skills spec puts scripts in scripts/, but real skills keep code in core/
// or eval-viewer/ too, so by default any file of the skill may be run, and
// a rule's script_dirs narrows that.

// RuleScriptDirsDefault is the rule ScriptDirsFor names when no matching
// rule sets script_dirs.
const RuleScriptDirsDefault = "default: any file of the skill (no matching rule sets script_dirs)"

// checkScriptDir says what is wrong with a script_dirs element, or "".
func checkScriptDir(dir string) string {
	switch {
	case dir == "":
		return "is empty: name a directory of the skill, like \"scripts\""
	case dir == ".":
		return "is the skill root, which allows every file: leave script_dirs out instead"
	case strings.HasPrefix(dir, "/"):
		return "is absolute: give a directory relative to the skill root, like \"scripts\""
	case strings.ContainsAny(dir, "\\*?[") || strings.ContainsFunc(dir, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "holds a backslash, a glob or a control character: give a plain directory path"
	case path.Clean(dir) != dir:
		return "is not a clean path (no \"./\", \"//\" or trailing \"/\")"
	case dir == ".." || strings.HasPrefix(dir, "../"):
		return "leaves the skill"
	}
	return ""
}

// ScriptDirsFor returns the directories of a skill (relative to its root,
// "/"-separated) that its scripts may be run from, and the rule(s) that set
// them. Every matching rule with script_dirs applies: the result is their
// intersection (the strictest), where a directory inside another counts as
// the narrower of the two; e.g. ["scripts", "core"] and ["scripts/tools"]
// give ["scripts/tools"].
//
// nil dirs means no matching rule restricts it: any file of the skill may
// be run (rule is RuleScriptDirsDefault). A non-nil empty slice means the
// rules leave no directory in common, so no script may be run. Use
// ScriptInDirs to check a script path against the result. It is
// For(skill).ScriptDirs, for callers that ask nothing else.
func (c *Config) ScriptDirsFor(skill string) (dirs []string, rule string) {
	d := c.For(skill).ScriptDirs
	return d.Value, d.Rule
}

// intersectDirs keeps what lies in a directory of both lists.
func intersectDirs(a, b []string) []string {
	out := []string{}
	seen := map[string]bool{}
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, x := range a {
		for _, y := range b {
			switch {
			case inDir(x, y):
				add(x)
			case inDir(y, x):
				add(y)
			}
		}
	}
	// A directory already covered by a broader one in the result is
	// redundant.
	var kept []string
	for _, d := range out {
		covered := false
		for _, e := range out {
			if e != d && inDir(d, e) {
				covered = true
				break
			}
		}
		if !covered {
			kept = append(kept, d)
		}
	}
	if kept == nil {
		kept = []string{}
	}
	return kept
}

// inDir reports whether p is dir or lies below it ("/"-separated).
func inDir(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// ScriptInDirs reports whether script (a clean path relative to the skill
// root, e.g. "core/make_gif.py") may be run under dirs as ScriptDirsFor
// returned them: nil allows every path, otherwise the script must lie
// below one of the directories.
func ScriptInDirs(script string, dirs []string) bool {
	if dirs == nil {
		return true
	}
	for _, d := range dirs {
		if strings.HasPrefix(script, d+"/") {
			return true
		}
	}
	return false
}
