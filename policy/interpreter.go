package policy

import (
	"bytes"
	"fmt"
	"path"
	"sort"
	"strings"
)

// Interpreter is how a script runs: in which image, behind which argv prefix
// (the caller appends the script's path inside the container and its args).
// It comes from configuration only, never from the caller, so a request can
// not pick a binary.
type Interpreter struct {
	Image string   `json:"image"`
	Argv  []string `json:"argv"`
	Rule  string   `json:"rule"` // e.g. `image "python" (skillbox.hcl:20)`
}

// Interpreter picks the image for a script: by its extension first; for a
// file with no known extension, by the interpreter its #! line names
// (#!/usr/bin/env python3, #!/bin/bash, ...). head is the start of the file
// (the first line is enough). The shebang only selects the image; its flags
// are not used.
func (c *Config) Interpreter(scriptPath string, head []byte) (Interpreter, error) {
	ext := strings.ToLower(path.Ext(scriptPath))
	if ext != "" {
		for _, im := range c.Images.List {
			for _, e := range im.Extensions {
				if e == ext {
					return interp(im), nil
				}
			}
		}
	}
	bin := shebangBinary(head)
	if bin != "" {
		if im := c.imageForBinary(bin); im != nil {
			return interp(im), nil
		}
	}
	what := fmt.Sprintf("extension %q is not configured", ext)
	if ext == "" {
		what = "it has no extension"
	}
	hint := "and it has no #! line"
	if bin != "" {
		hint = fmt.Sprintf("and its #! line names %q, which no image runs", bin)
	}
	return Interpreter{}, fmt.Errorf("%w %q: %s %s; known extensions: %s (add an image block to map more)",
		ErrNoInterpreter, scriptPath, what, hint, strings.Join(c.knownExtensions(), " "))
}

func interp(im *Image) Interpreter {
	return Interpreter{Image: im.Name, Argv: append([]string(nil), im.Interpreter...), Rule: im.Rule()}
}

func (c *Config) knownExtensions() []string {
	var out []string
	for _, im := range c.Images.List {
		out = append(out, im.Extensions...)
	}
	sort.Strings(out)
	return out
}

// imageForBinary finds the image that runs an interpreter named in a shebang:
// by its shebangs list or its interpreter's base name; failing that, with
// a minor version dropped (python3.12 → python3; python2 stays unmatched).
func (c *Config) imageForBinary(bin string) *Image {
	names := func(im *Image) []string {
		out := append([]string(nil), im.Shebangs...)
		if len(im.Interpreter) > 0 {
			out = append(out, path.Base(im.Interpreter[0]))
		}
		return out
	}
	for _, im := range c.Images.List {
		for _, n := range names(im) {
			if n == bin {
				return im
			}
		}
	}
	if want := trimVersion(bin); want != bin {
		for _, im := range c.Images.List {
			for _, n := range names(im) {
				if n == want {
					return im
				}
			}
		}
	}
	return nil
}

// trimVersion drops a trailing ".N" / "-N.M" version: python3.12 → python3.
func trimVersion(s string) string {
	if i := strings.IndexAny(s, ".-"); i > 0 {
		rest := s[i+1:]
		if rest != "" && strings.TrimLeft(rest, "0123456789.") == "" {
			return s[:i]
		}
	}
	return s
}

// shebangBinary returns the base name of the interpreter in a #! line,
// looking through /usr/bin/env (and its -S, -i, -u NAME, VAR=value forms).
func shebangBinary(head []byte) string {
	if !bytes.HasPrefix(head, []byte("#!")) {
		return ""
	}
	line := head[2:]
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	f := strings.Fields(strings.TrimSuffix(string(line), "\r"))
	if len(f) == 0 {
		return ""
	}
	if path.Base(f[0]) != "env" {
		return path.Base(f[0])
	}
	for i := 1; i < len(f); i++ {
		a := f[i]
		switch {
		case a == "-u" || a == "--unset" || a == "-C" || a == "--chdir":
			i++ // takes a value
		case strings.HasPrefix(a, "-S") && len(a) > 2:
			return path.Base(a[2:])
		case strings.HasPrefix(a, "-"):
		case strings.Contains(a, "="):
		default:
			return path.Base(a)
		}
	}
	return ""
}
