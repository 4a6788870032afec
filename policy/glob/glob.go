// Package glob is the language of workspace path patterns: the excludes
// policy writes and the inputs a caller names are read and checked by this
// one package, the same way for both, beneath the policy that grants them
// and the workspace that copies files by them.
package glob

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
)

// DefaultExcludes are the paths never copied into a run nor written back
// unless policy lists others: version control, environment files, keys
// and certificates, key stores.
var DefaultExcludes = []string{
	".git/", ".hg/", ".svn/",
	".env", ".env.*",
	".ssh/", ".gnupg/", ".aws/", ".kube/", ".docker/",
	"*.pem", "*.key", "*.crt", "*.cer", "*.der", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx",
	"id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
}

// Match reports whether the slash path rel matches pattern. A path matches
// when it, or a directory it lies in, matches:
//   - components are compared one by one with path.Match ("*", "?", "[a-z]",
//     "\" escapes), and a "**" component stands for any number (zero too)
//     of directories: "docs/**/*.md";
//   - a pattern without "/" matches a base name at any depth: "*.pem"
//     matches "a/b/key.pem" and everything under a directory "x.pem";
//   - a trailing "/" makes the pattern match a directory and everything
//     under it, and not a file of that name: "build/". Match cannot look
//     at the file system, so a rel ending in "/" names a directory; any
//     other rel is taken as a file (its ancestors are directories).
//
// A component that is not a valid path.Match pattern matches nothing;
// check patterns with Validate first.
func Match(pattern, rel string) bool {
	isDir := strings.HasSuffix(rel, "/")
	rel = strings.TrimSuffix(rel, "/")
	if rel == "" {
		return false
	}
	return Compile(pattern).Match(rel, isDir, true)
}

// Validate checks a pattern as Match reads it, for policy and for
// untrusted inputs: not empty, relative (no leading "/"), no empty, "." or
// ".." components, valid UTF-8 without control characters, at most
// runtime.MaxInputPathBytes bytes and runtime.MaxInputDepth components of
// at most 255 bytes, each a valid path.Match pattern. The error is of kind
// errkind.InvalidParams and names the pattern.
func Validate(p string) error { return Check(p, "pattern") }

// Check is Validate, its messages naming p a what ("input", "exclude
// pattern").
func Check(p, what string) error {
	bad := func(why string) error {
		return errkind.Errorf(errkind.InvalidParams, "%s %s %s", what, runtime.QuoteName(p), why)
	}
	switch {
	case p == "":
		return errkind.Errorf(errkind.InvalidParams, "%s is empty: give a relative path such as \"report.pdf\" or a glob such as \"docs/*.md\"", what)
	case len(p) > runtime.MaxInputPathBytes:
		return bad(fmt.Sprintf("is %d bytes long, at most %d", len(p), runtime.MaxInputPathBytes))
	case !utf8.ValidString(p):
		return bad("is not valid UTF-8")
	case strings.IndexFunc(p, unicode.IsControl) >= 0:
		return bad("contains a control character (or NUL)")
	case p[0] == '/':
		return bad("is an absolute path: give a path relative to the workspace, such as \"src/main.go\"")
	}
	parts := strings.Split(strings.TrimSuffix(p, "/"), "/")
	if len(parts) > runtime.MaxInputDepth {
		return bad(fmt.Sprintf("is %d levels deep, at most %d", len(parts), runtime.MaxInputDepth))
	}
	for _, c := range parts {
		switch {
		case c == "":
			return bad("has an empty path component (\"//\")")
		case c == "..":
			return bad("has a \"..\" component: paths must stay inside the workspace")
		case c == ".":
			return bad("has a \".\" component: write the path without it")
		case len(c) > 255:
			return bad(fmt.Sprintf("has a component of %d bytes, at most 255", len(c)))
		}
		if _, err := path.Match(c, ""); err != nil {
			return bad(fmt.Sprintf("has a malformed glob %q (an unclosed \"[\" or a trailing \"\\\"): %v", c, err))
		}
	}
	return nil
}

// HasMeta reports whether p is a glob rather than a literal path.
func HasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// Pattern is a compiled Match pattern.
type Pattern struct {
	raw     string
	dirOnly bool     // trailing "/"
	base    string   // set for a pattern without "/": matched against each component
	parts   []string // otherwise the components, "**" included
}

// Compile compiles p, which Validate has checked.
func Compile(p string) *Pattern {
	c := &Pattern{raw: p, dirOnly: strings.HasSuffix(p, "/")}
	body := strings.TrimSuffix(p, "/")
	if !strings.Contains(body, "/") {
		c.base = body
		return c
	}
	c.parts = strings.Split(body, "/")
	return c
}

// CompileAll compiles each of ps.
func CompileAll(ps []string) []*Pattern {
	out := make([]*Pattern, len(ps))
	for i, p := range ps {
		out[i] = Compile(p)
	}
	return out
}

// String is the pattern as written.
func (c *Pattern) String() string { return c.raw }

// Match reports whether rel (a directory when isDir) matches; ancestors
// says whether rel's parent directories are tried too (a walk that has
// tried them already says no).
func (c *Pattern) Match(rel string, isDir, ancestors bool) bool {
	if c.parts == nil {
		if c.base == "" {
			return false
		}
		if !c.dirOnly || isDir {
			if ok, _ := path.Match(c.base, path.Base(rel)); ok {
				return true
			}
		}
		if !ancestors {
			return false
		}
		for rest := rel; ; {
			i := strings.IndexByte(rest, '/')
			if i < 0 {
				return false
			}
			if ok, _ := path.Match(c.base, rest[:i]); ok {
				return true
			}
			rest = rest[i+1:]
		}
	}
	names := strings.Split(rel, "/")
	reach := prefixMatches(c.parts, names)
	n := len(names)
	if reach[n] && (!c.dirOnly || isDir) {
		return true
	}
	if ancestors {
		for j := 1; j < n; j++ {
			if reach[j] {
				return true
			}
		}
	}
	return false
}

// MayMatchUnder reports whether c may match a path under the directory
// dir: a base-name pattern always may; a pattern with "/" may if a
// beginning of it matches dir's components and some of it is left.
func (c *Pattern) MayMatchUnder(dir string) bool {
	if c.parts == nil {
		return c.base != ""
	}
	pp := c.parts
	// cur[i]: pp[:i] matches the components of dir seen so far.
	cur := make([]bool, len(pp)+1)
	next := make([]bool, len(pp)+1)
	cur[0] = true
	for i := 1; i <= len(pp) && pp[i-1] == "**"; i++ {
		cur[i] = true
	}
	for name := range strings.SplitSeq(dir, "/") {
		next[0] = false
		for i := 1; i <= len(pp); i++ {
			if pp[i-1] == "**" {
				next[i] = cur[i] || next[i-1]
			} else {
				next[i] = false
				if cur[i-1] {
					next[i], _ = path.Match(pp[i-1], name)
				}
			}
		}
		cur, next = next, cur
	}
	for i := 0; i < len(pp); i++ {
		if cur[i] {
			return true
		}
	}
	return cur[len(pp)] && pp[len(pp)-1] == "**"
}

// prefixMatches returns, for each j, whether the pattern components pp
// match names[:j] entirely. It is the dynamic program of glob matching
// ("**" matching any run of components), so it costs len(pp)*len(names)
// component matches whatever the pattern, never an exponential search.
func prefixMatches(pp, names []string) []bool {
	n := len(names)
	prev := make([]bool, n+1) // pp[:0] matches names[:j] only for j == 0
	prev[0] = true
	cur := make([]bool, n+1)
	for _, p := range pp {
		if p == "**" {
			cur[0] = prev[0]
			for j := 1; j <= n; j++ {
				cur[j] = prev[j] || cur[j-1]
			}
		} else {
			cur[0] = false
			for j := 1; j <= n; j++ {
				cur[j] = false
				if prev[j-1] {
					cur[j], _ = path.Match(p, names[j-1])
				}
			}
		}
		prev, cur = cur, prev
	}
	return prev
}
