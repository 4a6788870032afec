package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/skillbox/skillbox/runtime"
)

// Output names with escape sequences or newlines never reach
// results or logs raw.
func TestOutputNamesWithControlCharacters(t *testing.T) {
	wd := t.TempDir()
	for _, n := range []string{"ok.txt", "a\nb.txt", "\x1b[31mred.txt", "tab\there.txt"} {
		if err := os.WriteFile(filepath.Join(wd, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := collect(t, wd, runtime.DefaultLimits)
	for _, f := range o.Files {
		if strings.IndexFunc(f.Path, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Errorf("output path %q holds control characters", f.Path)
		}
	}
	for _, s := range o.Skipped {
		if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Errorf("skipped entry %q holds control characters", s)
		}
	}
	if len(o.Files) != 1 || len(o.Skipped) != 3 {
		t.Errorf("files %v skipped %q: want ok.txt collected and the three others named as skipped", o.Files, o.Skipped)
	}
}

// FuzzOutputName: whatever a script names a file, what results and logs
// carry is printable and bounded.
func FuzzOutputName(f *testing.F) {
	for _, s := range []string{"ok.txt", "a\nb", "\x1b[31mred", "\xff\xfe", strings.Repeat("n", 600)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		r := reportName(name)
		if strings.IndexFunc(r, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0 {
			t.Fatalf("reportName(%q) = %q holds unprintable characters", name, r)
		}
		if len(r) > 4*maxNameReported+16 {
			t.Fatalf("reportName of %d bytes gave %d bytes", len(name), len(r))
		}
		if printableName(name) && reportName(name) != name && len(name) <= maxNameReported {
			t.Fatalf("a printable short name was changed: %q → %q", name, r)
		}
	})
}
