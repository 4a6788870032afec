package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

// kept is the count the Workspace keeps, and whether it keeps one.
func kept(w *Workspace) (bytes int64, entries int, known bool) {
	w.count.mu.Lock()
	defer w.count.mu.Unlock()
	return w.count.bytes, w.count.entries, w.count.known
}

// keptMatches fails if the count w keeps differs from a walk of the tree.
func keptMatches(t *testing.T, w *Workspace, what string) {
	t.Helper()
	root, done, err := w.root()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	b, n, known := kept(w)
	if !known {
		return
	}
	wb, wn, err := w.usage(root)
	if err != nil {
		t.Fatalf("%s: walk: %v", what, err)
	}
	if b != wb || n != wn {
		t.Fatalf("%s: the count kept is %d bytes, %d entries; the tree holds %d, %d", what, b, n, wb, wn)
	}
}

// The count a quota is checked against is walked once, then kept by each
// WriteAt and Delete; what they cannot count exactly drops it. After each
// step the count kept (when there is one) is the tree's.
func TestUsageKept(t *testing.T) {
	q := Options{Quota: 100} // the tree holds 8 bytes
	type step struct {
		name string
		do   func(w *Workspace) error
		kept bool // a count is kept after the step
	}
	write := func(rel string, off int64, data string, truncate bool) func(w *Workspace) error {
		return func(w *Workspace) error {
			_, err := w.WriteAt(rel, off, []byte(data), truncate, 0, q)
			return err
		}
	}
	del := func(rel string, recursive bool) func(w *Workspace) error {
		return func(w *Workspace) error {
			_, err := w.Delete(rel, recursive)
			return err
		}
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"an upload in pieces", []step{
			{"first piece", write("up.bin", 0, "12345", true), true},
			{"second piece", write("up.bin", 5, "6789", false), true},
			{"in place", write("up.bin", 0, "ab", false), true},
			{"over the end", write("up.bin", 8, "xyz", false), true},
			{"started over", write("up.bin", 0, "1", true), true},
		}},
		{"a file in new directories", []step{
			{"new dirs: not counted", write("n/m/f", 0, "abc", true), false},
			{"walked again", write("n/m/f", 3, "def", false), true},
			{"beside it", write("n/m/g", 0, "g", true), true},
		}},
		{"deletions", []step{
			{"walked", write("a.txt", 5, "!", false), true},
			{"a file", del("a.txt", false), true},
			{"a link", del("link", false), true},
			{"an empty directory", del("empty", false), true},
			{"a directory not empty", del("d", false), false},
			{"walked again", write("new", 0, "n", true), true},
			{"recursively: not counted", del("d", true), false},
		}},
		{"refusals change nothing", []step{
			{"walked", write("a.txt", 5, "!", false), true},
			{"over the quota", write("big", 0, strings.Repeat("x", 100), true), true},
			{"missing", write("missing", 3, "x", false), true},
			{"a hole", write("a.txt", 99, "x", false), true},
		}},
		{"apply drops it", []step{
			{"walked", write("a.txt", 5, "!", false), true},
			{"apply", func(w *Workspace) error {
				_, err := w.Apply(nil, Changes{Written: []runtime.OutputFile{out("r/s.txt", "run")}}, false, q)
				return err
			}, false},
			{"walked again", write("a.txt", 6, "?", false), true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.file("a.txt", "hello")
			f.file("d/x.txt", "x")
			f.file("d/e/y.txt", "yy")
			f.dir("empty")
			f.symlink("link", "a.txt")
			w := f.open()
			for _, s := range c.steps {
				err := s.do(w) // refusals are steps too: what is kept is checked
				if _, _, known := kept(w); known != s.kept {
					t.Fatalf("%s (%v): count kept %v, want %v", s.name, err, known, s.kept)
				}
				keptMatches(t, w, s.name)
			}
		})
	}
}

// A change on disk made outside the Workspace (another process, another
// Workspace on the directory) is seen once the directory is opened again,
// as the daemon does for every call, or counted by Usage: the quota holds.
func TestQuotaAfterExternalChange(t *testing.T) {
	cases := []struct {
		name    string
		recount func(t *testing.T, f *fixture, w *Workspace) *Workspace
	}{
		{"re-opened", func(t *testing.T, f *fixture, w *Workspace) *Workspace { return f.open() }},
		{"counted by Usage", func(t *testing.T, f *fixture, w *Workspace) *Workspace {
			if b, _, err := w.Usage(); err != nil || b != 10 {
				t.Fatalf("Usage = %d, %v", b, err)
			}
			return w
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			w := f.open()
			q := Options{Quota: 10}
			if _, err := w.WriteAt("a.txt", 0, []byte("12345"), true, 0, q); err != nil {
				t.Fatal(err)
			}
			if _, _, known := kept(w); !known {
				t.Fatal("no count kept after a write with a quota")
			}
			f.file("outside-the-api.txt", "12345") // the workspace is at its quota
			w = c.recount(t, f, w)
			_, err := w.WriteAt("a.txt", 5, []byte("6"), false, 0, q)
			wantKind(t, "WriteAt over the quota", err, api.ErrLimitExceeded)
			if !strings.Contains(err.Error(), "it holds 10") {
				t.Errorf("the error does not say what is held: %v", err)
			}
			if got := f.read("a.txt"); got != "12345" {
				t.Errorf("a.txt = %q", got)
			}
		})
	}
}

// A write the count kept would refuse is let through when a walk shows it
// fits: a count that is too high never refuses on its own.
func TestQuotaRefusalWalksAgain(t *testing.T) {
	f := newFixture(t)
	f.file("old.txt", "12345")
	w := f.open()
	q := Options{Quota: 10}
	if _, err := w.WriteAt("a.txt", 0, []byte("12345"), true, 0, q); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.path("old.txt")); err != nil { // outside the API
		t.Fatal(err)
	}
	if _, err := w.WriteAt("a.txt", 5, []byte("67890"), false, 0, q); err != nil {
		t.Fatalf("WriteAt that fits = %v", err)
	}
	if b, n, known := kept(w); !known || b != 10 || n != 1 {
		t.Errorf("kept %d, %d, %v", b, n, known)
	}
}

// BenchmarkWriteAtQuota: an upload in pieces under a quota, on workspaces
// of growing size. Each piece is checked against the count kept, not by a
// walk: the time per piece does not grow with the workspace.
func BenchmarkWriteAtQuota(b *testing.B) {
	const pieces, piece = 16, 4 << 10
	data := make([]byte, piece)
	for _, files := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			dir := b.TempDir()
			for d := range files / 100 {
				sub := filepath.Join(dir, fmt.Sprintf("d%03d", d))
				if err := os.Mkdir(sub, 0o755); err != nil {
					b.Fatal(err)
				}
				for i := range 100 {
					if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%02d", i)), []byte("x"), 0o644); err != nil {
						b.Fatal(err)
					}
				}
			}
			w, err := Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			o := Options{Quota: 1 << 30}
			upload := func() {
				for i := range pieces {
					if _, err := w.WriteAt("upload.bin", int64(i*piece), data, i == 0, 0, o); err != nil {
						b.Fatal(err)
					}
				}
			}
			upload() // the one walk
			n := 0
			for b.Loop() {
				upload()
				n++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*pieces), "ns/piece")
		})
	}
}

// Uploads and deletions at once on one Workspace: the count kept is the
// tree's once they are done, and the quota was never passed.
func TestUsageKeptConcurrent(t *testing.T) {
	f := newFixture(t)
	f.file("a.txt", "hello")
	w := f.open()
	q := Options{Quota: 4000}
	if _, _, err := w.Usage(); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			rel := fmt.Sprintf("g%d/f", g)
			var err error
			size := int64(0)
			for i := range 50 {
				switch {
				case i%7 == 6: // deleted, then started over without a quota
					if _, err = w.Delete(rel, false); err == nil {
						size, err = w.WriteAt(rel, 0, []byte("y"), true, 0, Options{})
					}
				default: // a piece at the end, the first one making the file
					size, err = w.WriteAt(rel, size, []byte("0123456789"), size == 0, 0, q)
				}
				if err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	keptMatches(t, w, "after the uploads")
	if _, err := w.WriteAt("a.txt", 5, []byte("!"), false, 0, q); err != nil {
		t.Fatal(err)
	}
	if _, _, known := kept(w); !known {
		t.Error("no count kept")
	}
	keptMatches(t, w, "after one more piece")
}

// List and Usage walk the tree with one walker, each to its own depth:
// List no deeper than a run's /work, Usage to maxUsageDepth (what lies in
// a directory that deep is deeper) and then an error, never an
// undercount.
func TestWalkDepth(t *testing.T) {
	nested := func(n int) string { return strings.TrimSuffix(strings.Repeat("d/", n), "/") }
	cases := []struct {
		name     string
		dirs     int // directories nested
		usageErr error
		listed   int // entries a recursive List gives
	}{
		{name: "shallow", dirs: 3, listed: 4},
		{name: "as deep as /work", dirs: runtime.MaxInputDepth - 1, listed: runtime.MaxInputDepth},
		{name: "deeper than /work", dirs: runtime.MaxInputDepth + 3, listed: runtime.MaxInputDepth},
		{name: "as deep as Usage goes", dirs: maxUsageDepth - 1, listed: runtime.MaxInputDepth},
		{name: "deeper than Usage goes", dirs: maxUsageDepth, usageErr: api.ErrLimitExceeded, listed: runtime.MaxInputDepth},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.dir(nested(c.dirs))
			if err := os.WriteFile(filepath.Join(f.path(nested(c.dirs)), "f"), []byte("abc"), 0o644); err != nil {
				t.Fatal(err)
			}
			w := f.open()
			b, n, err := w.Usage()
			wantKind(t, "Usage", err, c.usageErr)
			if c.usageErr == nil && (b != 3 || n != c.dirs+1) {
				t.Errorf("Usage = %d bytes, %d entries; want 3, %d", b, n, c.dirs+1)
			}
			es, truncated, err := w.List("", true, 0)
			if err != nil || truncated || len(es) != c.listed {
				t.Errorf("List = %d entries, truncated %v, %v; want %d", len(es), truncated, err, c.listed)
			}
		})
	}
}

// A tree that WriteAt grows past the entries a walk may count fails the
// next quota check as a walk of it would, the count kept or not.
func TestUsageKeptEntryBound(t *testing.T) {
	old := usageEntries
	usageEntries = 5
	defer func() { usageEntries = old }()
	f := newFixture(t)
	f.file("a", "a")
	f.file("b", "b")
	f.file("c", "c")
	f.file("d", "d") // 4 entries
	w := f.open()
	q := Options{Quota: 1000}
	steps := []struct {
		rel string
		err error
	}{
		{rel: "e"},                            // a walk of 4
		{rel: "f"},                            // 5
		{rel: "g", err: api.ErrLimitExceeded}, // 6: more than a walk counts
		{rel: "a"},                            // no growth: no count needed
	}
	for _, s := range steps {
		t.Run(s.rel, func(t *testing.T) {
			_, err := w.WriteAt(s.rel, 0, []byte("x"), true, 0, q)
			wantKind(t, "WriteAt("+s.rel+")", err, s.err)
		})
	}
	gone(f, "g")
}
