package glob

import (
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// FuzzMatch: Validate and Match never panic; a valid literal
// pattern matches itself and everything under it; a path matches when
// one of its directories does.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"a.txt", "a.txt"}, {"*.pem", "x/k.pem"}, {".git/", ".git/config"}, {"docs/**/*.md", "docs/a/b.md"},
		{"**", "x"}, {"[a-", "a"}, {`\`, `\`}, {"a//b", "a/b"}, {"../x", "x"}, {"/abs", "abs"}, {"a/**/**/b", "a/b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, rel string) {
		valid := Validate(p) == nil
		got := Match(p, rel)
		if !valid {
			return
		}
		if !HasMeta(p) && !strings.HasSuffix(p, "/") {
			if !Match(p, p) || !Match(p, p+"/x") {
				t.Fatalf("literal %q does not match itself or what lies under it", p)
			}
		}
		clean := strings.TrimSuffix(rel, "/")
		if !got || runtime.ValidateInputName(clean) != nil {
			return
		}
		if under := clean + "/x"; !Match(p, under) {
			t.Fatalf("Match(%q, %q) but not %q under it", p, rel, under)
		}
		// A glob walk skips a directory only where nothing under it
		// can match: every directory on the way to a match that does
		// not match itself must be walked.
		c := Compile(p)
		for i := strings.IndexByte(clean, '/'); i >= 0; {
			dir := clean[:i]
			if !c.Match(dir, true, true) && !c.MayMatchUnder(dir) {
				t.Fatalf("Match(%q, %q) but a walk would skip %q", p, rel, dir)
			}
			next := strings.IndexByte(clean[i+1:], '/')
			if next < 0 {
				break
			}
			i += 1 + next
		}
	})
}
