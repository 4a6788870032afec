package replicaname

import (
	"strconv"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"skillbox-0", true},
		{"host.example.com", true},
		{"skillbox-7d9f8c6b5-x2x4q", true},
		{"A_1", true},
		{strings.Repeat("a", MaxLen), true},
		{"", false},
		{strings.Repeat("a", MaxLen+1), false},
		{".", false},
		{"..", false},
		{"-x", false},
		{"a/b", false},
		{"a b", false},
		{"a\nb", false},
		{"é", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.name)
			if (err == nil) != tc.ok {
				t.Fatalf("Check(%q) = %v, want ok=%v", tc.name, err, tc.ok)
			}
		})
	}
}

// FuzzCheck: a name Check accepts is one path element that
// stays inside its parent and prints as itself.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"skillbox-0", "..", "a/b", "a\x00b", ".x", "x.", "é", "A_b.c-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if Check(s) != nil {
			return
		}
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00 \n\t") || len(s) > MaxLen {
			t.Fatalf("accepted %q", s)
		}
		if q := strconv.Quote(s); q[1:len(q)-1] != s {
			t.Fatalf("accepted %q, which does not print as itself", s)
		}
	})
}
