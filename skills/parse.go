package skills

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Size limits applied before any YAML decoding. SKILL.md files are meant to be
// short (the standard recommends under 500 lines), so these are generous for
// real skills while keeping hostile input cheap: yaml.v3's duplicate-key check
// is quadratic in the number of keys, so the frontmatter is capped before the
// parser ever sees it.
const (
	// MaxFileSize is the largest SKILL.md accepted.
	MaxFileSize = 1 << 20 // 1 MiB
	// MaxFrontmatterSize caps the YAML between the two '---' fences.
	MaxFrontmatterSize = 64 << 10 // 64 KiB
	// maxDepth bounds nesting inside the frontmatter; real skills use two levels.
	maxDepth = 32
)

// Document is a parsed SKILL.md: the decoded frontmatter and the markdown
// body that follows it. Parse does not validate fields; see LoadDir.
type Document struct {
	// Frontmatter maps each top-level key to its value: string, bool, int,
	// float64, nil, []any or map[string]any. Values under "metadata" are
	// always strings, as written in the file ("version: 1.0" gives "1.0").
	Frontmatter map[string]any
	// Keys lists the top-level keys in file order.
	Keys []string
	// Body is the markdown after the closing fence, with CRLF turned into LF.
	Body string

	// nodes keeps the YAML node of each top-level value so validation can
	// tell a quoted "true" from a bool and report line numbers.
	nodes map[string]*yaml.Node
}

// Line returns the 1-based line in SKILL.md where key's value starts, or 0.
func (d *Document) Line(key string) int {
	if n := d.nodes[key]; n != nil {
		return n.Line + 1 // +1 for the opening fence
	}
	return 0
}

// Parse splits a SKILL.md into frontmatter and body and decodes the
// frontmatter. It refuses input that is too large, not UTF-8, starts with a
// byte order mark or anything other than '---', contains control characters
// in the frontmatter, or uses YAML aliases, custom tags or duplicate keys.
// Errors are ValidationErrors wrapping ErrInvalid (and ErrTooLarge for size).
func Parse(data []byte) (*Document, error) {
	if len(data) > MaxFileSize {
		return nil, parseErr(ErrTooLarge, "SKILL.md is %d bytes, larger than the %d-byte limit; move long material into references/", len(data), MaxFileSize)
	}
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		return nil, parseErr(nil, "SKILL.md starts with a UTF-8 byte order mark; save it as UTF-8 without BOM so it begins with '---'")
	}
	if !utf8.Valid(data) {
		return nil, parseErr(nil, "SKILL.md is not valid UTF-8 (first bad byte at line %d); re-save it as UTF-8", badUTF8Line(data))
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, parseErr(nil, "SKILL.md contains a NUL byte at line %d; it must be a text file", 1+bytes.Count(data[:i], []byte("\n")))
	}
	first, rest, ok := cutLine(data)
	if !ok && len(first) == 0 {
		return nil, parseErr(nil, "SKILL.md is empty; it must start with a '---' line, YAML frontmatter with name and description, and a closing '---' line")
	}
	if !isFence(first) {
		return nil, parseErr(nil, "SKILL.md must start with a '---' line that opens the YAML frontmatter, found %q", clip(string(first), 40))
	}
	if !ok {
		return nil, parseErr(nil, "frontmatter is not closed: add a '---' line after the YAML")
	}
	// Find the closing fence without looking further than the cap, so a
	// huge file without one costs at most MaxFrontmatterSize of scanning.
	var fm []byte
	body := []byte(nil)
	closed := false
	tooLong := parseErr(ErrTooLarge, "frontmatter is longer than %d bytes or has no closing '---' line; keep the frontmatter short and close it with '---'", MaxFrontmatterSize)
	for off := 0; off <= len(rest); {
		if off > MaxFrontmatterSize {
			return nil, tooLong
		}
		line, after, more := cutLine(rest[off:])
		if isFence(line) {
			fm = rest[:off]
			body = after
			closed = true
			break
		}
		if !more {
			break
		}
		off = len(rest) - len(after)
	}
	if !closed {
		if len(rest) > MaxFrontmatterSize {
			return nil, tooLong
		}
		return nil, parseErr(nil, "frontmatter is not closed: add a '---' line after the YAML")
	}
	if len(fm) > MaxFrontmatterSize {
		return nil, tooLong
	}
	fm = bytes.ReplaceAll(fm, []byte("\r\n"), []byte("\n"))
	if line, r := findControl(fm); r >= 0 {
		return nil, parseErr(nil, "frontmatter line %d contains control character %U; remove it", line+2, r)
	}

	doc := &Document{
		Frontmatter: map[string]any{},
		Body:        strings.ReplaceAll(string(body), "\r\n", "\n"),
		nodes:       map[string]*yaml.Node{},
	}
	if len(bytes.TrimSpace(fm)) == 0 {
		return doc, nil // empty frontmatter: validation reports missing fields
	}

	// Decode into a yaml.Node only: building the node tree is linear and
	// expands no aliases; the Go values are built below by our own walk,
	// which checks duplicates with a map instead of yaml.v3's pairwise loop.
	dec := yaml.NewDecoder(bytes.NewReader(fm))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		return nil, parseErr(nil, "frontmatter is not valid YAML: %s", yamlMsg(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, parseErr(nil, "frontmatter must be a single YAML document; remove the extra '...' or '---' separators")
	}
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = *root.Content[0]
	}
	if root.Kind == 0 || (root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null") {
		return doc, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, parseErr(nil, "frontmatter must be a mapping of keys to values (like 'name: my-skill'), found a %s", kindName(&root))
	}
	var errs ValidationErrors
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key, err := keyString(k)
		if err != nil {
			errs = append(errs, ValidationError{Field: "frontmatter", Value: k.Value, Message: err.Error(), Err: ErrInvalid})
			continue
		}
		if prev, dup := seen[key]; dup {
			errs = append(errs, ValidationError{Field: key, Message: fmt.Sprintf("duplicate key at lines %d and %d; keep one", prev+1, k.Line+1), Err: ErrInvalid})
			continue
		}
		seen[key] = k.Line
		val, err := convert(v, key, key == "metadata", 1)
		if err != nil {
			errs = append(errs, ValidationError{Field: key, Message: err.Error(), Err: ErrInvalid})
			continue
		}
		doc.Frontmatter[key] = val
		doc.Keys = append(doc.Keys, key)
		doc.nodes[key] = v
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return doc, nil
}

// convert turns a checked YAML node into plain Go values. Aliases, anchors,
// custom tags, non-scalar keys and duplicate keys are refused here, so no
// decoding step ever expands or compares more than the input's own size.
func convert(n *yaml.Node, path string, stringsOnly bool, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels; flatten it", maxDepth)
	}
	if n.Kind == yaml.AliasNode {
		return nil, fmt.Errorf("uses a YAML alias (*%s) at line %d; aliases are not allowed in SKILL.md, write the value out", n.Value, n.Line+1)
	}
	if n.Anchor != "" {
		return nil, fmt.Errorf("uses a YAML anchor (&%s) at line %d; anchors are not allowed in SKILL.md, write the value out", n.Anchor, n.Line+1)
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if r := controlRune(n.Value); r >= 0 {
			return nil, fmt.Errorf("value at line %d contains control character %U; remove it", n.Line+1, r)
		}
		return scalar(n, stringsOnly)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			v, err := convert(c, fmt.Sprintf("%s[%d]", path, i), stringsOnly, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, err := keyString(n.Content[i])
			if err != nil {
				return nil, err
			}
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("duplicate key %q at lines %d and %d; keep one", key, prev+1, n.Content[i].Line+1)
			}
			seen[key] = n.Content[i].Line
			v, err := convert(n.Content[i+1], path+"."+key, stringsOnly, depth+1)
			if err != nil {
				return nil, err
			}
			out[key] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported YAML node at line %d", n.Line+1)
}

// scalar resolves a YAML scalar the way the core schema does, but keeps
// timestamps and anything that does not fit a Go number as the written text.
// With stringsOnly (metadata) every scalar is its written text.
func scalar(n *yaml.Node, stringsOnly bool) (any, error) {
	tag := n.ShortTag()
	switch tag {
	case "!!str", "!!timestamp":
		return n.Value, nil
	case "!!null":
		if stringsOnly {
			return "", nil
		}
		return nil, nil
	case "!!bool", "!!int", "!!float":
		if stringsOnly {
			return n.Value, nil
		}
	default:
		return nil, fmt.Errorf("uses YAML tag %s at line %d; only plain strings, numbers, booleans, lists and mappings are allowed", tag, n.Line+1)
	}
	switch tag {
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return n.Value, nil
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return n.Value, nil // too big for int64: keep the text
		}
		return i, nil
	default:
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return n.Value, nil // .inf, .nan and friends do not survive JSON
		}
		return f, nil
	}
}

func keyString(k *yaml.Node) (string, error) {
	if k.Kind == yaml.AliasNode || k.Anchor != "" {
		return "", fmt.Errorf("key at line %d uses a YAML alias or anchor; write the key out", k.Line+1)
	}
	if k.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("key at line %d is a %s; keys must be plain strings", k.Line+1, kindName(k))
	}
	if tag := k.ShortTag(); tag == "!!binary" || (strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!")) {
		return "", fmt.Errorf("key at line %d uses YAML tag %s; keys must be plain strings", k.Line+1, tag)
	}
	if r := controlRune(k.Value); r >= 0 {
		return "", fmt.Errorf("key at line %d contains control character %U", k.Line+1, r)
	}
	return k.Value, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.ScalarNode:
		return "single value"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// cutLine returns the first line of b without its line ending, the rest
// after it, and whether a line ending was found.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return b, nil, false
	}
	line = b[:i]
	line = bytes.TrimSuffix(line, []byte("\r"))
	return line, b[i+1:], true
}

// isFence reports whether line is '---', allowing trailing blanks.
func isFence(line []byte) bool {
	return string(bytes.TrimRight(line, " \t")) == "---"
}

// isControl is true for characters that have no business in frontmatter
// values: C0 controls except tab and newline, DEL and the C1 range.
func isControl(r rune) bool {
	return r != '\t' && r != '\n' && unicode.IsControl(r)
}

func controlRune(s string) rune {
	for _, r := range s {
		if isControl(r) {
			return r
		}
	}
	return -1
}

// findControl returns the 0-based line and the first control character in b.
func findControl(b []byte) (int, rune) {
	line := 0
	for _, r := range string(b) {
		if r == '\n' {
			line++
			continue
		}
		if isControl(r) {
			return line, r
		}
	}
	return 0, -1
}

func badUTF8Line(b []byte) int {
	line := 1
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size <= 1 {
			return line
		}
		if r == '\n' {
			line++
		}
		b = b[size:]
	}
	return line
}

// yamlMsg shortens yaml.v3 errors, which start with "yaml: ", and shifts
// their line numbers by one for the opening fence.
func yamlMsg(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				return fmt.Sprintf("line %d:%s", n+1, rest[i+1:])
			}
		}
	}
	return msg
}

func parseErr(sentinel error, format string, args ...any) error {
	e := ValidationError{Field: "SKILL.md", Message: fmt.Sprintf(format, args...), Err: ErrInvalid}
	if sentinel != nil {
		e.Err = sentinel
	}
	return ValidationErrors{e}
}

// clip shortens s to at most n runes for error messages.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
