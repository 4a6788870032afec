package policy

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is where something was declared. A zero Line means it was not declared
// in a file but is a built-in default.
type Pos struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

// String renders "file:line", or "built-in" for defaults.
func (p Pos) String() string {
	if p.Line == 0 {
		return "built-in"
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// Problem is one thing wrong with a config file. Field is the dotted path of
// the setting (e.g. `policy "x".limits.memory`) so the message can be acted
// on even without looking at the file.
type Problem struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// String renders "file:line: field: message".
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteString(":")
		if p.Line > 0 {
			fmt.Fprintf(&b, "%d:", p.Line)
		}
		b.WriteString(" ")
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// ConfigError collects every problem found in a file, so one run of
// `skillbox policy check` reports them all. It wraps ErrConfig.
type ConfigError struct {
	Problems []Problem
}

func (e *ConfigError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.Is(err, ErrConfig) hold.
func (e *ConfigError) Unwrap() error { return ErrConfig }

func (e *ConfigError) sort() {
	sort.SliceStable(e.Problems, func(i, j int) bool {
		a, b := e.Problems[i], e.Problems[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}
