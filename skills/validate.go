package skills

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Limits from the Agent Skills specification (agentskills.io).
const (
	MaxNameLen          = 64
	MaxDescriptionLen   = 1024
	MaxCompatibilityLen = 500
)

// StandardFields are the frontmatter keys the specification defines.
var StandardFields = []string{"name", "description", "license", "compatibility", "metadata", "allowed-tools"}

// ExtensionFields are well-known keys other hosts added (mostly Claude
// Code's), accepted with LoadOptions.AllowExtensions.
var ExtensionFields = []string{
	"user-invocable", "disable-model-invocation", "context", "agent", "model",
	"argument-hint", "hooks", "version", "triggers", "portable", "tags", "requires",
}

// LoadOptions select how strictly a skill is checked.
type LoadOptions struct {
	// AllowExtensions accepts ExtensionFields besides the standard ones.
	AllowExtensions bool
	// Lenient turns every problem except an unusable name or description
	// into a warning on Skill.Warnings, so indexing never drops a skill over
	// something cosmetic.
	Lenient bool
}

// ValidationError is one problem with a SKILL.md, naming the field and the
// offending value.
type ValidationError struct {
	Field   string `json:"field"`
	Value   string `json:"value,omitempty"`
	Message string `json:"message"`
	// Err is the sentinel this problem wraps (ErrInvalid unless noted).
	Err error `json:"-"`
}

func (e ValidationError) Error() string {
	if e.Value != "" {
		return fmt.Sprintf("%s %q: %s", e.Field, clip(e.Value, 80), e.Message)
	}
	return e.Field + ": " + e.Message
}

// Unwrap returns the sentinel, so errors.Is(err, ErrInvalid) holds.
func (e ValidationError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return ErrInvalid
}

// ValidationErrors collects every problem found in one SKILL.md: checks do
// not stop at the first failure so an author can fix everything in one pass.
type ValidationErrors []ValidationError

func (es ValidationErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap exposes ErrInvalid and each problem's sentinel to errors.Is.
func (es ValidationErrors) Unwrap() []error {
	out := make([]error, 0, len(es)+1)
	out = append(out, ErrInvalid)
	for _, e := range es {
		out = append(out, e)
	}
	return out
}

// ValidName checks a skill name against the specification: after NFKC
// normalisation 1-64 characters, lowercase letters (any script), digits and
// hyphens, no hyphen at either end or twice in a row. Because names are used
// to look skills up, anything path-like ("..", "/", NUL) is refused first.
func ValidName(name string) error {
	if probs := nameProblems(name); len(probs) > 0 {
		return fmt.Errorf("%w %q: %s", ErrBadName, clip(name, 80), strings.Join(probs, "; "))
	}
	return nil
}

// NormalizeName returns the NFKC form under which a name is compared.
func NormalizeName(name string) string { return norm.NFKC.String(name) }

// pathLikeName reports a name that reads as a path: refused even when
// indexing leniently, never replaced by the directory's name.
func pathLikeName(name string) bool {
	return strings.ContainsAny(name, "/\\\x00") || name == "." || name == ".."
}

func nameProblems(name string) []string {
	switch {
	case name == "":
		return []string{"must not be empty"}
	case !utf8.ValidString(name):
		return []string{"is not valid UTF-8"}
	case pathLikeName(name):
		return []string{"skill names are not paths: '/', '\\', NUL, '.' and '..' are not allowed; use the name from 'skillbox skills list'"}
	}
	n := NormalizeName(name)
	var probs []string
	if c := utf8.RuneCountInString(n); c > MaxNameLen {
		probs = append(probs, fmt.Sprintf("is %d characters, at most %d allowed", c, MaxNameLen))
	}
	var upper, bad []string
	for _, r := range n {
		switch {
		case r == '-':
		case unicode.IsLetter(r):
			if unicode.IsUpper(r) || unicode.IsTitle(r) {
				upper = appendOnce(upper, string(r))
			}
		case unicode.IsNumber(r):
		default:
			bad = appendOnce(bad, fmt.Sprintf("%q", r))
		}
	}
	if len(upper) > 0 {
		probs = append(probs, fmt.Sprintf("must be lowercase (has %s)", strings.Join(upper, " ")))
	}
	if len(bad) > 0 {
		probs = append(probs, fmt.Sprintf("may contain only letters, digits and hyphens (has %s)", strings.Join(bad, " ")))
	}
	if strings.HasPrefix(n, "-") || strings.HasSuffix(n, "-") {
		probs = append(probs, "must not start or end with a hyphen")
	}
	if strings.Contains(n, "--") {
		probs = append(probs, "must not contain consecutive hyphens")
	}
	return probs
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// LoadDir reads and validates the skill in dir (a directory holding
// SKILL.md) and computes its digest. Problems come back as ValidationErrors
// wrapping ErrInvalid; with opts.Lenient, only an unusable name or
// description is an error and the rest land in Skill.Warnings.
func LoadDir(dir string, opts LoadOptions) (*Skill, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("skill directory %s: %w", dir, err)
	}
	location := filepath.Join(abs, "SKILL.md")
	data, err := readSkillFile(abs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", location, err)
	}
	doc, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", location, err)
	}
	s, err := newSkill(doc, filepath.Base(abs), opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", location, err)
	}
	s.Dir, s.Location = abs, location
	if s.Digest, err = Digest(abs); err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	return s, nil
}

// readSkillFile reads SKILL.md with the same confinement as any other skill
// file (no escaping symlink, no FIFO, no hardlink), capped at MaxFileSize.
func readSkillFile(dir string) ([]byte, error) {
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, ValidationErrors{{Field: "SKILL.md", Message: "skill directory does not exist; check the path", Err: ErrNotFound}}
		}
		return nil, err
	}
	if !st.IsDir() {
		return nil, ValidationErrors{{Field: "SKILL.md", Message: "not a directory; give the skill directory or its SKILL.md", Err: ErrInvalid}}
	}
	f, err := OpenInRoot(dir, "SKILL.md")
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, ValidationErrors{{Field: "SKILL.md", Message: "missing; a skill directory needs a SKILL.md file at its top", Err: ErrNotFound}}
		}
		return nil, ValidationErrors{{Field: "SKILL.md", Message: err.Error(), Err: sentinelOf(err)}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	return data, nil
}

// newSkill validates doc and builds the Skill. dirName is the directory's
// base name (empty to skip the name-matches-directory rule).
func newSkill(doc *Document, dirName string, opts LoadOptions) (*Skill, error) {
	v := &validator{doc: doc, opts: opts}
	s := &Skill{Properties: doc.Frontmatter, Body: doc.Body}

	// name and description decide whether the skill is usable at all;
	// leniently, a skill whose name is missing or unusable (hosts load
	// "name: Getting Started" or no name at all) is indexed under its
	// directory's name when that is a valid one, with a warning.
	dirFallback := opts.Lenient && dirName != "" && len(nameProblems(dirName)) == 0
	if _, present := doc.Frontmatter["name"]; !present && dirFallback {
		s.Name = NormalizeName(dirName)
		v.add("name", "", fmt.Sprintf("is missing; indexed under the directory name %q (add 'name: %s' to the frontmatter)", s.Name, s.Name))
	} else if name, ok := v.str("name", true); ok {
		if probs := nameProblems(name); len(probs) > 0 && dirFallback && !pathLikeName(name) {
			s.Name = NormalizeName(dirName)
			v.add("name", name, fmt.Sprintf("%s; indexed under the directory name %q (set 'name: %s')", strings.Join(probs, "; "), s.Name, s.Name))
		} else if len(probs) > 0 {
			for _, p := range probs {
				v.fatal("name", name, p)
			}
		} else {
			s.Name = NormalizeName(name)
			if dirName != "" && NormalizeName(dirName) != s.Name {
				switch {
				case !opts.Lenient:
					v.add("name", name, fmt.Sprintf("must equal the directory name %q; rename the directory or the skill", dirName))
				case dirFallback:
					// A skill is known by its directory's name: were the
					// frontmatter to decide, any new directory could claim a
					// trusted skill's name, and its policy with it.
					s.Name = NormalizeName(dirName)
					v.add("name", name, fmt.Sprintf("differs from the directory name %q; indexed under the directory name %q only (rename the directory or set 'name: %s')", dirName, s.Name, s.Name))
				default:
					v.fatal("name", name, fmt.Sprintf("differs from the directory name %q, which is not a valid skill name (%s); a skill is known by its directory's name: rename the directory to %q",
						dirName, strings.Join(nameProblems(dirName), "; "), s.Name))
				}
			}
		}
	}
	if desc, ok := v.str("description", true); ok {
		switch c := utf8.RuneCountInString(desc); {
		case strings.TrimSpace(desc) == "":
			v.fatal("description", "", "must not be empty; say what the skill does and when to use it")
		case c > MaxDescriptionLen:
			s.Description = desc
			v.add("description", desc, fmt.Sprintf("is %d characters, at most %d allowed", c, MaxDescriptionLen))
		default:
			s.Description = desc
		}
	}
	if lic, ok := v.str("license", false); ok {
		s.License = lic
	}
	if comp, ok := v.str("compatibility", false); ok {
		switch c := utf8.RuneCountInString(comp); {
		case strings.TrimSpace(comp) == "":
			v.add("compatibility", "", "must not be empty when present; remove the field or describe the environment")
		case c > MaxCompatibilityLen:
			v.add("compatibility", comp, fmt.Sprintf("is %d characters, at most %d allowed", c, MaxCompatibilityLen))
			s.Compatibility = comp
		default:
			s.Compatibility = comp
		}
	}
	if raw, ok := doc.Frontmatter["metadata"]; ok {
		s.Metadata = v.metadata(raw)
	}
	if raw, ok := doc.Frontmatter["allowed-tools"]; ok {
		s.AllowedTools = v.toolList("allowed-tools", raw)
	}

	// Extension fields: checked for type always, refused in strict mode
	// without AllowExtensions.
	for _, key := range doc.Keys {
		if isStandard(key) {
			continue
		}
		raw := doc.Frontmatter[key]
		if !isExtension(key) {
			v.add(key, "", fmt.Sprintf("unknown field; the standard allows only %s (put custom data under metadata)", strings.Join(StandardFields, ", ")))
			continue
		}
		if !opts.AllowExtensions {
			v.add(key, "", "is an extension field, not part of the standard; allow extensions (--allow-extensions) or move it under metadata")
		}
		switch key {
		case "disable-model-invocation":
			s.DisableModelInvocation = v.boolean(key, raw)
		case "user-invocable", "portable":
			v.boolean(key, raw)
		case "context", "agent", "model", "argument-hint":
			v.str(key, false)
		case "version":
			switch raw.(type) {
			case string, int64, float64:
			default:
				v.add(key, fmt.Sprint(raw), "must be a single value like \"1.2.0\"")
			}
		case "hooks":
			hooks, probs := ParseHooks(raw)
			for _, p := range probs {
				v.add(key, "", p)
			}
			s.Hooks, s.HookErrors = hooks, probs
		case "triggers":
			v.stringList(key, raw)
		case "tags":
			s.Tags = v.stringList(key, raw)
		case "requires":
			for _, name := range v.stringList(key, raw) {
				if probs := nameProblems(name); len(probs) > 0 {
					v.add(key, name, "is not a valid skill name: "+strings.Join(probs, "; "))
					continue
				}
				s.Requires = append(s.Requires, NormalizeName(name))
			}
		}
	}

	if len(v.fatals) > 0 || (!opts.Lenient && len(v.errs) > 0) {
		all := append(v.fatals, v.errs...)
		sortByField(all, doc)
		return nil, all
	}
	for _, e := range v.errs {
		s.Warnings = append(s.Warnings, e.Error())
	}
	return s, nil
}

type validator struct {
	doc    *Document
	opts   LoadOptions
	fatals ValidationErrors // name/description unusable: error even when lenient
	errs   ValidationErrors // everything else
}

func (v *validator) add(field, value, msg string) {
	v.errs = append(v.errs, ValidationError{Field: field, Value: value, Message: msg, Err: ErrInvalid})
}

func (v *validator) fatal(field, value, msg string) {
	v.fatals = append(v.fatals, ValidationError{Field: field, Value: value, Message: msg, Err: ErrInvalid})
}

// str fetches a string field; required fields that are missing or not a
// string are fatal.
func (v *validator) str(field string, required bool) (string, bool) {
	raw, ok := v.doc.Frontmatter[field]
	report := v.add
	if required {
		report = v.fatal
	}
	if !ok {
		if required {
			report(field, "", fmt.Sprintf("is required; add '%s: ...' to the frontmatter", field))
		}
		return "", false
	}
	s, ok := raw.(string)
	if !ok {
		report(field, display(raw), fmt.Sprintf("must be a string, found %s; quote the value", typeName(raw)))
		return "", false
	}
	return s, true
}

func (v *validator) boolean(field string, raw any) bool {
	b, ok := raw.(bool)
	if !ok {
		v.add(field, display(raw), "must be true or false")
	}
	return b
}

func (v *validator) metadata(raw any) map[string]string {
	m, ok := raw.(map[string]any)
	if !ok {
		if raw == nil {
			return nil
		}
		v.add("metadata", display(raw), "must be a mapping of string keys to string values")
		return nil
	}
	out := make(map[string]string, len(m))
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		s, ok := m[k].(string)
		if !ok {
			v.add("metadata."+k, display(m[k]), fmt.Sprintf("must be a string, found %s", typeName(m[k])))
			continue
		}
		out[k] = s
	}
	return out
}

// stringList accepts a YAML list of strings or one string of items
// separated by commas or blanks.
func (v *validator) stringList(field string, raw any) []string {
	switch x := raw.(type) {
	case nil:
		return []string{}
	case string:
		return SplitToolList(x)
	case []any:
		out := make([]string, 0, len(x))
		for i, item := range x {
			s, ok := item.(string)
			if !ok || strings.TrimSpace(s) == "" {
				v.add(fmt.Sprintf("%s[%d]", field, i), display(item), "must be a non-empty string")
				continue
			}
			out = append(out, strings.TrimSpace(s))
		}
		return out
	}
	v.add(field, display(raw), "must be a list of strings or a space-separated string")
	return nil
}

// toolList parses allowed-tools: the standard's space-separated string or
// a YAML list. Parenthesised arguments such as Bash(git status:*) stay one
// tool even when they contain blanks.
func (v *validator) toolList(field string, raw any) []string {
	tools := v.stringList(field, raw)
	for _, t := range tools {
		if depth := parenDepth(t); depth != 0 {
			v.add(field, t, "has unbalanced parentheses; write tools like Bash(git:*)")
		}
	}
	if tools == nil {
		tools = []string{}
	}
	return tools
}

// SplitToolList splits the string form of allowed-tools ("Read, Bash(git:*)
// Bash(npm run test:*)") into tool patterns: separators are blanks and commas
// outside parentheses, so a pattern's specifier stays whole.
func SplitToolList(s string) []string {
	out := []string{}
	var cur strings.Builder
	depth := 0
	flush := func() {
		if t := strings.TrimSpace(cur.String()); t != "" {
			out = append(out, t)
		}
		cur.Reset()
	}
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')':
			if depth > 0 {
				depth--
			}
		case depth == 0 && (r == ',' || unicode.IsSpace(r)):
			flush()
			continue
		}
		cur.WriteRune(r)
	}
	flush()
	return out
}

func parenDepth(s string) int {
	d := 0
	for _, r := range s {
		switch r {
		case '(':
			d++
		case ')':
			d--
			if d < 0 {
				return d
			}
		}
	}
	return d
}

// sentinelOf picks the package sentinel err wraps, for re-wrapping.
func sentinelOf(err error) error {
	for _, s := range []error{ErrEscape, ErrNotRegular, ErrTooLarge, ErrNotFound, ErrBadName} {
		if errors.Is(err, s) {
			return s
		}
	}
	return ErrInvalid
}

func isStandard(key string) bool { return slices.Contains(StandardFields, key) }

func isExtension(key string) bool { return slices.Contains(ExtensionFields, key) }

// sortByField orders problems as the fields appear in the file.
func sortByField(errs ValidationErrors, doc *Document) {
	pos := map[string]int{}
	for i, k := range doc.Keys {
		pos[k] = i + 1
	}
	at := func(f string) int {
		if i := strings.IndexAny(f, ".["); i > 0 {
			f = f[:i]
		}
		if p, ok := pos[f]; ok {
			return p
		}
		return 0 // missing fields first
	}
	sort.SliceStable(errs, func(i, j int) bool { return at(errs[i].Field) < at(errs[j].Field) })
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

func display(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []any, map[string]any:
		return ""
	}
	return fmt.Sprint(v)
}
