package deps

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// ParsePEP723 reads the inline script metadata block of a Python script
// (PEP 723: "# /// script" … "# ///") and returns its dependencies, each
// checked like a requirements line. A script without a block has none. Two
// script blocks, an unclosed block or invalid TOML are errors (PEP 723 says
// tools must refuse them).
func ParsePEP723(script []byte, file string) ([]Requirement, error) {
	if len(script) > 4*maxDeclBytes {
		script = script[:4*maxDeclBytes]
	}
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(make([]byte, 0, 4096), 4*maxDeclBytes+1)
	var (
		in        bool
		found     bool
		startLine int
		body      strings.Builder
		lineNo    int
	)
	for sc.Scan() {
		lineNo++
		l := strings.TrimRight(sc.Text(), "\r")
		if !in {
			if strings.HasPrefix(l, "# /// ") && strings.TrimSpace(l[len("# /// "):]) == "script" {
				if found {
					return nil, errkind.Errorf(ErrInvalid, "%s:%d: a second \"# /// script\" block; PEP 723 allows one", file, lineNo)
				}
				in, found, startLine = true, true, lineNo
				body.Reset()
			}
			continue
		}
		switch {
		case l == "# ///":
			in = false
		case l == "#":
			body.WriteString("\n")
		case strings.HasPrefix(l, "# "):
			body.WriteString(l[2:])
			body.WriteString("\n")
		default:
			return nil, errkind.Errorf(ErrInvalid, "%s:%d: the \"# /// script\" block opened at line %d is not closed with \"# ///\"", file, lineNo, startLine)
		}
	}
	if in {
		return nil, errkind.Errorf(ErrInvalid, "%s:%d: the \"# /// script\" block is not closed with \"# ///\"", file, startLine)
	}
	if !found {
		return nil, nil
	}
	var meta struct {
		Dependencies   []string `toml:"dependencies"`
		RequiresPython string   `toml:"requires-python"`
	}
	if _, err := toml.Decode(body.String(), &meta); err != nil {
		return nil, errkind.Errorf(ErrInvalid, "%s:%d: script metadata: %w", file, startLine, err)
	}
	var out []Requirement
	for _, d := range meta.Dependencies {
		r, err := ParseRequirement(d, fmt.Sprintf("%s:%d", file, startLine))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
