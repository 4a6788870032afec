package glob

import (
	"errors"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime/errkind"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, rel string
		want         bool
	}{
		{"a.txt", "a.txt", true},
		{"a.txt", "sub/a.txt", true}, // a base name at any depth
		{"a.txt", "b.txt", false},
		{"*.pem", "key.pem", true},
		{"*.pem", "deep/er/key.pem", true},
		{"*.pem", "certs.pem/inner.txt", true}, // under a matching directory
		{"*.pem", "key.pem.txt", false},
		{".env", ".env", true},
		{".env.*", ".env.local", true},
		{".env.*", ".env", false},
		{".git/", ".git/", true},
		{".git/", ".git/config", true},
		{".git/", "sub/.git/objects/ab/cd", true},
		{".git/", ".git", false}, // a file named .git is not a directory
		{".git/", ".github/workflows/ci.yml", false},
		{"docs/*.md", "docs/a.md", true},
		{"docs/*.md", "docs/sub/a.md", false},
		{"docs/*.md", "x/docs/a.md", false}, // a pattern with "/" is anchored
		{"docs/**/*.md", "docs/a.md", true},
		{"docs/**/*.md", "docs/x/y/a.md", true},
		{"docs/**/*.md", "docs/x/y/a.txt", false},
		{"**/*.md", "a.md", true},
		{"**/*.md", "x/a.md", true},
		{"**", "anything/at/all", true},
		{"build/", "build/", true},
		{"build/", "build/out/x.o", true},
		{"src/gen/", "src/gen/a.go", true},
		{"src/gen/", "src/gen", false},
		{"src/gen", "src/gen", true},
		{"src/gen", "src/gen/a.go", true}, // everything under a matching path
		{"src/gen", "src/generated", false},
		{"a/**/b/**/c", "a/b/c", true},
		{"a/**/b/**/c", "a/x/b/y/z/c", true},
		{"a/**/b/**/c", "a/x/y/z/c", false},
		{"[ab].txt", "b.txt", true},
		{`\*.txt`, "*.txt", true},
		{`\*.txt`, "a.txt", false},
		{"[", "[", false}, // malformed: matches nothing
		{"a.txt", "", false},
		{"", "a", false},
	} {
		t.Run(tc.pattern+"~"+tc.rel, func(t *testing.T) {
			if got := Match(tc.pattern, tc.rel); got != tc.want {
				t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.rel, got, tc.want)
			}
		})
	}
}

func TestMatchManyDoubleStars(t *testing.T) {
	// The dynamic program keeps this polynomial; a backtracking matcher
	// would take C(32,16) steps.
	p := strings.Repeat("**/x/", 15) + "y"
	rel := strings.Repeat("x/", 30) + "z"
	if Match(p, rel) {
		t.Fatalf("Match(%q, %q) = true", p, rel)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, p, want string // want "" is valid
	}{
		{"file", "a.txt", ""},
		{"glob", "docs/**/*.md", ""},
		{"dir", ".git/", ""},
		{"everything", "**", ""},
		{"empty", "", "empty"},
		{"absolute", "/etc/passwd", "absolute"},
		{"root", "/", "absolute"},
		{"dotdot", "../outside", `".."`},
		{"dotdot inside", "a/../../b", `".."`},
		{"dot", "./a", `"."`},
		{"double slash", "a//b", "empty path component"},
		{"nul", "a\x00b", "control character"},
		{"newline", "a\nb", "control character"},
		{"not utf8", "a\xffb", "UTF-8"},
		{"long", strings.Repeat("a/", 600), "bytes long"},
		{"deep", strings.Repeat("a/", 33) + "b", "levels deep"},
		{"long component", strings.Repeat("c", 256), "component of 256 bytes"},
		{"bad glob", "a/[b", "malformed glob"},
		{"trailing backslash", `a\`, "malformed glob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.p)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate(%q) = %v, want nil", tc.p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate(%q) = %v, want an error containing %q", tc.p, err, tc.want)
			}
			if !errors.Is(err, errkind.InvalidParams) {
				t.Errorf("Validate(%q) = %v, not of kind invalid params", tc.p, err)
			}
		})
	}
	for _, p := range DefaultExcludes {
		if err := Validate(p); err != nil {
			t.Errorf("DefaultExcludes: %v", err)
		}
	}
}

func TestMayMatchUnder(t *testing.T) {
	for _, tc := range []struct {
		pattern, dir string
		want         bool
	}{
		{"*.md", "any/dir", true},
		{"docs/*.md", "docs", true},
		{"docs/*.md", "src", false},
		{"docs/*.md", "docs/sub", false},
		{"docs/**/*.md", "docs/a/b", true},
		{"docs/**/*.md", "src/docs", false},
		{"**/x/y", "a/b", true},
		{"d*/sub/", "dx", true},
		{"d*/sub/", "dx/sub", false}, // it matches there; nothing under it is left to match
		{"a/**", "a/b", true},
	} {
		if got := Compile(tc.pattern).MayMatchUnder(tc.dir); got != tc.want {
			t.Errorf("MayMatchUnder(%q, %q) = %v, want %v", tc.pattern, tc.dir, got, tc.want)
		}
	}
}
