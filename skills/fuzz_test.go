package skills

import (
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// FuzzParse checks the frontmatter parser never panics, stays fast, and
// never lets a control character through into a decoded key or value.
// Seeds live in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte("---\nname: a\ndescription: b\n---\nbody\n"))
	f.Add([]byte("---\r\nname: a\r\nmetadata:\r\n  v: 1.0\r\n---\r\n"))
	f.Add([]byte("---\nx: &a [1]\ny: *a\n---\n"))
	f.Add([]byte("---\nallowed-tools: [Read, \"Bash(git:*)\"]\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var doc *Document
		var err error
		if cpu, _ := measure(func() { doc, err = Parse(data) }); cpu > raceSlowdown*time.Second {
			t.Fatalf("Parse took %v of CPU", cpu)
		}
		if err != nil {
			if doc != nil {
				t.Fatal("document returned with an error")
			}
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		for _, k := range doc.Keys {
			if controlRune(k) >= 0 {
				t.Fatalf("control character in key %q", k)
			}
			checkValue(t, doc.Frontmatter[k])
		}
		if len(doc.Keys) != len(doc.Frontmatter) {
			t.Fatalf("keys %v vs frontmatter %v", doc.Keys, doc.Frontmatter)
		}
		again, err := Parse(data)
		if err != nil || !reflect.DeepEqual(again.Frontmatter, doc.Frontmatter) || again.Body != doc.Body {
			t.Fatal("Parse is not deterministic")
		}
		// Validation must cope with whatever Parse accepts.
		_, _ = newSkill(doc, "", LoadOptions{Lenient: true, AllowExtensions: true})
		_, _ = newSkill(doc, "x", LoadOptions{})
	})
}

func checkValue(t *testing.T, v any) {
	switch x := v.(type) {
	case string:
		if controlRune(x) >= 0 {
			t.Fatalf("control character in value %q", x)
		}
	case []any:
		for _, e := range x {
			checkValue(t, e)
		}
	case map[string]any:
		for k, e := range x {
			if controlRune(k) >= 0 {
				t.Fatalf("control character in key %q", k)
			}
			checkValue(t, e)
		}
	}
}

// FuzzReadFile throws arbitrary relative paths at a skill full of escape
// attempts. Whatever succeeds must be a singly linked regular file that
// lies inside the skill directory. Seeds live in testdata/fuzz/FuzzReadFile.
func FuzzReadFile(f *testing.F) {
	root, _ := confinementTree(f)
	inside := map[[2]uint64]bool{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil && st.Nlink == 1 {
			inside[[2]uint64{st.Dev, st.Ino}] = true
		}
		return nil
	})
	for _, seed := range []string{
		"references/guide.md", "link-inside", "../outside/secret.txt", "link-rel-out",
		"link-abs-out", "link-proc", "link-dir-out/secret.txt", "hardlink", "fifo",
		"references", "a\x00b", "/etc/passwd", "references/deep/sneaky",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		fl, err := OpenInRoot(root, rel)
		if err != nil {
			return
		}
		defer fl.Close()
		var st syscall.Stat_t
		if err := syscall.Fstat(int(fl.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		if !inside[[2]uint64{st.Dev, st.Ino}] {
			t.Fatalf("OpenInRoot(%q) opened a file that is not a plain file inside the skill", rel)
		}
		fc, err := ReadFile(root, rel, ReadOptions{MaxBytes: 64})
		if err == nil && strings.Contains(fc.Content, "SECRET") {
			t.Fatalf("ReadFile(%q) leaked the outside file", rel)
		}
	})
}
