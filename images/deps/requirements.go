package deps

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// Requirement is one declared Python dependency in a form pip accepts,
// stripped of everything that would change where it comes from.
type Requirement struct {
	// Name is the PEP 503 normalised project name ("pyyaml").
	Name string `json:"name"`
	// Spec is the requirement without hashes: name, extras, version
	// specifiers and an environment marker ("pillow>=10; python_version>'3'").
	Spec string `json:"spec"`
	// Hashes are the "sha256:<hex>" values the declaration pins; when any
	// is given the artifact must match one of them.
	Hashes []string `json:"hashes,omitempty"`
	// Source says where it was declared ("requirements.txt:3").
	Source string `json:"source"`
}

// Line is the canonical text of the requirement, used in the layer key.
func (r Requirement) Line() string {
	s := r.Spec
	for _, h := range r.Hashes {
		s += " --hash=" + h
	}
	return s
}

var (
	// A PEP 508 name, optional extras, then version specifiers and/or a marker.
	reqNameRE  = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[A-Za-z0-9._,\s-]*\])?\s*(.*)$`)
	specRE     = regexp.MustCompile(`^\(?\s*((~=|==|!=|<=|>=|<|>|===)\s*[A-Za-z0-9.*+!_-]+\s*)(,\s*(~=|==|!=|<=|>=|<|>|===)\s*[A-Za-z0-9.*+!_-]+\s*)*\)?$`)
	markerRE   = regexp.MustCompile(`^[A-Za-z0-9_.'"<>=!~ ()-]*$`)
	hashRE     = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	normNameRE = regexp.MustCompile(`[-_.]+`)
)

// NormalizeName is the PEP 503 normal form of a Python project name.
func NormalizeName(n string) string {
	return strings.ToLower(normNameRE.ReplaceAllString(n, "-"))
}

// maxDeclBytes caps a declaration file; a larger one is refused.
const maxDeclBytes = 1 << 20

// ParseRequirements reads a requirements file (pip's format, restricted):
// one requirement per line with optional --hash=sha256:… options, comments
// and backslash continuations. Options that change where packages come from
// (-r, -c, -e, --index-url, --find-links, …), URLs and paths are refused with
// the file and line: sources come from the config, never from a skill.
func ParseRequirements(data []byte, file string) ([]Requirement, error) {
	if len(data) > maxDeclBytes {
		return nil, errkind.Errorf(ErrInvalid, "%s is larger than %d bytes", file, maxDeclBytes)
	}
	var out []Requirement
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxDeclBytes+1)
	lineNo, start := 0, 0
	var logical strings.Builder
	for sc.Scan() {
		lineNo++
		l := sc.Text()
		if logical.Len() == 0 {
			start = lineNo
		}
		if strings.HasSuffix(l, "\\") {
			logical.WriteString(strings.TrimSuffix(l, "\\"))
			logical.WriteByte(' ')
			continue
		}
		logical.WriteString(l)
		text := logical.String()
		logical.Reset()
		r, ok, err := parseRequirementLine(text, fmt.Sprintf("%s:%d", file, start))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, errkind.Errorf(ErrInvalid, "%s: %w", file, err)
	}
	if logical.Len() > 0 {
		r, ok, err := parseRequirementLine(logical.String(), fmt.Sprintf("%s:%d", file, start))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// parseRequirementLine parses one logical line; ok is false for blank and
// comment lines.
func parseRequirementLine(text, where string) (Requirement, bool, error) {
	if strings.IndexByte(text, 0) >= 0 {
		return Requirement{}, false, errkind.Errorf(ErrInvalid, "%s: NUL byte", where)
	}
	// A comment starts at '#' at the line start or after whitespace.
	if i := strings.Index(text, "#"); i == 0 {
		text = ""
	} else if i > 0 {
		for j := 0; j < len(text); j++ {
			if text[j] == '#' && (j == 0 || text[j-1] == ' ' || text[j-1] == '\t') {
				text = text[:j]
				break
			}
		}
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return Requirement{}, false, nil
	}
	if strings.HasPrefix(text, "-") {
		opt, _, _ := strings.Cut(text, " ")
		opt, _, _ = strings.Cut(opt, "=")
		return Requirement{}, false, errkind.Errorf(ErrInvalid, "%s: option %q is not supported in a skill's requirements: package sources come from the config (python_index), and a requirement is a name with version specifiers", where, opt)
	}
	var hashes []string
	fields := strings.Fields(text)
	var spec []string
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if f == "--hash" && i+1 < len(fields) {
			f = "--hash=" + fields[i+1]
			i++
		}
		if h, ok := strings.CutPrefix(f, "--hash="); ok {
			if !hashRE.MatchString(h) {
				return Requirement{}, false, errkind.Errorf(ErrInvalid, "%s: hash %q: write --hash=sha256:<64 hex digits>", where, clip(h))
			}
			hashes = append(hashes, h)
			continue
		}
		if strings.HasPrefix(f, "-") {
			return Requirement{}, false, errkind.Errorf(ErrInvalid, "%s: option %q is not supported per requirement (only --hash)", where, clip(f))
		}
		if len(hashes) > 0 {
			return Requirement{}, false, errkind.Errorf(ErrInvalid, "%s: text after --hash options: put the requirement first", where)
		}
		spec = append(spec, f)
	}
	r, err := ParseRequirement(strings.Join(spec, " "), where)
	if err != nil {
		return Requirement{}, false, err
	}
	sort.Strings(hashes)
	r.Hashes = hashes
	return r, true, nil
}

// ParseRequirement parses one PEP 508 requirement without URL or hashes
// ("pillow>=10", "requests[socks]==2.31; python_version >= '3.8'").
func ParseRequirement(s, where string) (Requirement, error) {
	s = strings.TrimSpace(s)
	req, marker, hasMarker := strings.Cut(s, ";")
	if strings.Contains(req, "@") || strings.Contains(req, "://") || strings.ContainsAny(req, "/\\") {
		return Requirement{}, errkind.Errorf(ErrInvalid, "%s: %q: URLs and paths are not allowed; name a package from the configured index", where, clip(s))
	}
	m := reqNameRE.FindStringSubmatch(strings.TrimSpace(req))
	if m == nil {
		return Requirement{}, errkind.Errorf(ErrInvalid, "%s: %q is not a requirement (write name[extras] and version specifiers, e.g. pillow>=10)", where, clip(s))
	}
	name, extras, rest := m[1], m[2], strings.TrimSpace(m[3])
	if rest != "" && !specRE.MatchString(rest) {
		return Requirement{}, errkind.Errorf(ErrInvalid, "%s: %q: version specifier %q is not understood (use ==, >=, <, ~=, != with versions)", where, clip(s), clip(rest))
	}
	canon := NormalizeName(name)
	if extras != "" {
		parts := strings.Split(strings.Trim(extras, "[]"), ",")
		var ex []string
		for _, p := range parts {
			if p = strings.TrimSpace(p); p != "" {
				ex = append(ex, NormalizeName(p))
			}
		}
		sort.Strings(ex)
		if len(ex) > 0 {
			canon += "[" + strings.Join(ex, ",") + "]"
		}
	}
	if rest != "" {
		canon += strings.Join(strings.Fields(strings.Trim(rest, "()")), "")
	}
	if hasMarker {
		marker = strings.TrimSpace(marker)
		if marker == "" || !markerRE.MatchString(marker) {
			return Requirement{}, errkind.Errorf(ErrInvalid, "%s: %q: environment marker %q is not understood", where, clip(s), clip(marker))
		}
		canon += "; " + strings.Join(strings.Fields(marker), " ")
	}
	return Requirement{Name: NormalizeName(name), Spec: canon, Source: where}, nil
}

// Specifiers returns the version specifier part of the requirement (">=10,<12"),
// "" when any version will do.
func (r Requirement) Specifiers() string {
	s, _, _ := strings.Cut(r.Spec, ";")
	if i := strings.IndexByte(s, ']'); i >= 0 {
		return s[i+1:]
	}
	m := reqNameRE.FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	return m[3]
}

// Marker returns the requirement's environment marker, "" when none.
func (r Requirement) Marker() string {
	_, m, _ := strings.Cut(r.Spec, ";")
	return strings.TrimSpace(m)
}

// Extras reports whether the requirement asks for extras.
func (r Requirement) Extras() bool {
	s, _, _ := strings.Cut(r.Spec, ";")
	return strings.Contains(s, "[")
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
