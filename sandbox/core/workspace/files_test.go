package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

// hostile is a workspace with the ways out and the files never to be
// read or written in place: links up and out, a link to the canary, a
// FIFO, a hard link of the canary.
func hostile(t *testing.T) (*fixture, *Workspace) {
	t.Helper()
	f := newFixture(t)
	f.file("a.txt", "hello")
	f.file("d/x.txt", "x")
	f.dir("empty")
	f.symlink("up", "..")
	f.symlink("abs", f.outside)
	f.symlink("canary", "../outside/canary.txt")
	f.symlink("in", "a.txt")
	f.fifo("pipe")
	if err := os.Link(f.canary, f.path("hl")); err != nil {
		t.Fatal(err)
	}
	return f, f.open()
}

// wantKind fails unless err is of kind (nil: no error).
func wantKind(t *testing.T, what string, err, kind error) {
	t.Helper()
	switch {
	case kind == nil && err != nil:
		t.Fatalf("%s: %v", what, err)
	case kind != nil && !errors.Is(err, kind):
		t.Fatalf("%s = %v, want an error of kind %v", what, err, kind)
	}
}

func entryPaths(es []api.WorkspaceEntry) string {
	var p []string
	for _, e := range es {
		p = append(p, e.Path+":"+e.Type)
	}
	return strings.Join(p, " ")
}

func TestFilesHostilePaths(t *testing.T) {
	f, w := hostile(t)
	for _, rel := range []string{
		"..", "../outside/canary.txt", "/etc/passwd", f.canary, "a//b", "./a.txt", "d/../a.txt", "a.txt\x00",
		"up/outside/canary.txt", "abs/canary.txt", "canary/x", "a.txt/x",
	} {
		t.Run(rel, func(t *testing.T) {
			_, _, err := w.List(rel, true, 0)
			wantKind(t, "List", err, api.ErrInvalidParams)
			if !strings.Contains(rel, "/") || rel == "a//b" || strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, "./") || strings.Contains(rel, "..") {
				_, err = w.Stat(rel)
				wantKind(t, "Stat", err, api.ErrInvalidParams)
			}
			_, _, _, err = w.ReadAt(rel, 0, 0)
			wantKind(t, "ReadAt", err, api.ErrInvalidParams)
			_, err = w.WriteAt(rel, 0, []byte("x"), true, 0, Options{})
			wantKind(t, "WriteAt", err, api.ErrInvalidParams)
			_, err = w.Delete(rel, true)
			wantKind(t, "Delete", err, api.ErrInvalidParams)
		})
	}
	// The workspace itself is never written or deleted.
	for _, rel := range []string{"", "."} {
		_, err := w.WriteAt(rel, 0, []byte("x"), true, 0, Options{})
		wantKind(t, "WriteAt of the workspace", err, api.ErrInvalidParams)
		_, err = w.Delete(rel, true)
		wantKind(t, "Delete of the workspace", err, api.ErrInvalidParams)
	}
	if f.read("a.txt") != "hello" {
		t.Fatal("a.txt changed")
	}
}

func TestList(t *testing.T) {
	f, w := hostile(t)
	f.file("d/sub/y", "yy")
	f.file("d.txt", "dd")
	cases := []struct {
		rel       string
		recursive bool
		limit     int
		want      string
		truncated bool
		err       error
	}{
		{rel: "", want: "a.txt:file abs:symlink canary:symlink d:dir d.txt:file empty:dir hl:file in:symlink pipe:other up:symlink"},
		{rel: ".", limit: 3, want: "a.txt:file abs:symlink canary:symlink", truncated: true},
		{rel: "", recursive: true, want: "a.txt:file abs:symlink canary:symlink d:dir d/sub:dir d/sub/y:file d/x.txt:file d.txt:file empty:dir hl:file in:symlink pipe:other up:symlink"},
		{rel: "", recursive: true, limit: 6, want: "a.txt:file abs:symlink canary:symlink d:dir d/sub:dir d/sub/y:file", truncated: true},
		{rel: "", recursive: true, limit: 13, want: "a.txt:file abs:symlink canary:symlink d:dir d/sub:dir d/sub/y:file d/x.txt:file d.txt:file empty:dir hl:file in:symlink pipe:other up:symlink"},
		{rel: "d", want: "d/sub:dir d/x.txt:file"},
		{rel: "d/", recursive: true, want: "d/sub:dir d/sub/y:file d/x.txt:file"},
		{rel: "empty", want: ""},
		{rel: "a.txt", err: api.ErrInvalidParams},
		{rel: "up", err: api.ErrInvalidParams},
		{rel: "abs", recursive: true, err: api.ErrInvalidParams},
		{rel: "pipe", err: api.ErrInvalidParams},
		{rel: "missing", err: api.ErrNotFound},
		{rel: "missing/deeper", err: api.ErrNotFound},
	}
	for _, c := range cases {
		within(t, func() {
			es, trunc, err := w.List(c.rel, c.recursive, c.limit)
			wantKind(t, "List("+c.rel+")", err, c.err)
			if c.err != nil {
				return
			}
			if got := entryPaths(es); got != c.want || trunc != c.truncated {
				t.Errorf("List(%q, %v, %d) = %s, %v; want %s, %v", c.rel, c.recursive, c.limit, got, trunc, c.want, c.truncated)
			}
		})
	}
	es, _, _ := w.List("", false, 0)
	for _, e := range es {
		switch e.Path {
		case "a.txt":
			if e.Size != 5 || e.Mode != 0o644 || e.MTime == "" || e.SHA256 != "" {
				t.Errorf("a.txt: %+v", e)
			}
		case "up":
			if e.Target != ".." {
				t.Errorf("up: %+v", e)
			}
		}
	}
}

func TestStat(t *testing.T) {
	f, w := hostile(t)
	cases := []struct {
		rel, typ, sha, target string
		err                   error
	}{
		{rel: "a.txt", typ: "file", sha: sum([]byte("hello"))},
		{rel: "d/x.txt", typ: "file", sha: sum([]byte("x"))},
		{rel: "", typ: "dir"},
		{rel: "d/", typ: "dir"},
		{rel: "in", typ: "symlink", target: "a.txt"},
		{rel: "canary", typ: "symlink", target: "../outside/canary.txt"},
		{rel: "pipe", typ: "other"},
		{rel: "hl", typ: "file"}, // hard-linked: not read, no SHA-256
		{rel: "missing", err: api.ErrNotFound},
		{rel: "in/x", err: api.ErrInvalidParams},
	}
	for _, c := range cases {
		within(t, func() {
			e, err := w.Stat(c.rel)
			wantKind(t, "Stat("+c.rel+")", err, c.err)
			if c.err == nil && (e.Type != c.typ || e.SHA256 != c.sha || e.Target != c.target) {
				t.Errorf("Stat(%q) = %+v", c.rel, e)
			}
		})
	}
	if e, _ := w.Stat("."); e.Path != "." {
		t.Errorf("Stat(.) = %+v", e)
	}
	_ = f
}

func TestReadAt(t *testing.T) {
	f, w := hostile(t)
	big := bytes.Repeat([]byte("0123456789"), api.MaxWorkspaceChunk/10+2)
	if err := os.WriteFile(f.path("big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		rel     string
		off, n  int64
		want    string
		wantLen int
		eof     bool
		err     error
	}{
		{rel: "a.txt", want: "hello", eof: true},
		{rel: "a.txt", off: 1, n: 2, want: "el"},
		{rel: "a.txt", off: 3, n: 100, want: "lo", eof: true},
		{rel: "a.txt", off: 5, want: "", eof: true},
		{rel: "a.txt", off: 6, err: api.ErrInvalidParams},
		{rel: "a.txt", off: -1, err: api.ErrInvalidParams},
		{rel: "big", n: 1 << 30, wantLen: api.MaxWorkspaceChunk},
		{rel: "big", off: api.MaxWorkspaceChunk, wantLen: len(big) - api.MaxWorkspaceChunk, eof: true},
		{rel: "d", err: api.ErrInvalidParams},
		{rel: "in", err: api.ErrInvalidParams},
		{rel: "canary", err: api.ErrInvalidParams},
		{rel: "pipe", err: api.ErrDenied},
		{rel: "hl", err: api.ErrDenied},
		{rel: "missing", err: api.ErrNotFound},
	}
	for _, c := range cases {
		within(t, func() {
			data, size, eof, err := w.ReadAt(c.rel, c.off, c.n)
			wantKind(t, "ReadAt("+c.rel+")", err, c.err)
			if c.err != nil {
				if strings.Contains(string(data), "canary") {
					t.Fatalf("ReadAt(%q) read the canary", c.rel)
				}
				return
			}
			if c.wantLen > 0 {
				if len(data) != c.wantLen || size != int64(len(big)) || !bytes.Equal(data, big[c.off:c.off+int64(len(data))]) {
					t.Errorf("ReadAt(%q, %d, %d): %d bytes of %d", c.rel, c.off, c.n, len(data), size)
				}
			} else if string(data) != c.want {
				t.Errorf("ReadAt(%q, %d, %d) = %q", c.rel, c.off, c.n, data)
			}
			if eof != c.eof {
				t.Errorf("ReadAt(%q, %d, %d): eof %v", c.rel, c.off, c.n, eof)
			}
		})
	}
}

func TestWriteAt(t *testing.T) {
	type step struct {
		rel      string
		off      int64
		data     string
		truncate bool
		perm     uint32
		o        Options
		size     int64
		err      error
	}
	cases := []struct {
		name  string
		steps []step
		check func(f *fixture)
	}{
		{"create", []step{{rel: "new.txt", data: "abc", truncate: true, size: 3}}, func(f *fixture) {
			expect(f, "new.txt", "abc")
			mode(f, "new.txt", 0o644)
		}},
		{"create with parents and mode", []step{{rel: "n/e/w.sh", data: "#!", truncate: true, perm: 0o750, size: 2}}, func(f *fixture) {
			expect(f, "n/e/w.sh", "#!")
			mode(f, "n/e/w.sh", 0o750)
			mode(f, "n/e", 0o755)
		}},
		{"in pieces", []step{
			{rel: "up.bin", data: "one", truncate: true, size: 3},
			{rel: "up.bin", off: 3, data: "two", size: 6},
			{rel: "up.bin", off: 1, data: "XX", size: 6},
			{rel: "up.bin", off: 6, size: 6},
		}, func(f *fixture) { expect(f, "up.bin", "oXXtwo") }},
		{"truncate shrinks, keeps the mode", []step{{rel: "a.txt", data: "hi", truncate: true, size: 2}}, func(f *fixture) {
			expect(f, "a.txt", "hi")
			mode(f, "a.txt", 0o600)
		}},
		{"truncate with a mode", []step{{rel: "a.txt", data: "hi", truncate: true, perm: 0o640, size: 2}}, func(f *fixture) { mode(f, "a.txt", 0o640) }},
		{"past the end", []step{{rel: "a.txt", off: 6, data: "x", err: api.ErrInvalidParams}}, func(f *fixture) { expect(f, "a.txt", "hello") }},
		{"negative offset", []step{{rel: "a.txt", off: -1, data: "x", err: api.ErrInvalidParams}}, nil},
		{"truncate not at 0", []step{{rel: "a.txt", off: 2, data: "x", truncate: true, err: api.ErrInvalidParams}}, func(f *fixture) { expect(f, "a.txt", "hello") }},
		{"missing without truncate", []step{{rel: "nope", data: "x", err: api.ErrNotFound}, {rel: "no/pe", data: "x", err: api.ErrNotFound}}, func(f *fixture) {
			gone(f, "nope")
			gone(f, "no")
		}},
		{"mode bits", []step{{rel: "s", data: "x", truncate: true, perm: 0o4755, err: api.ErrInvalidParams}}, func(f *fixture) { gone(f, "s") }},
		{"over the chunk", []step{{rel: "big", data: strings.Repeat("x", api.MaxWorkspaceChunk+1), truncate: true, err: api.ErrLimitExceeded}}, func(f *fixture) { gone(f, "big") }},
		{"a symlink to the canary", []step{{rel: "canary", data: "x", truncate: true, err: api.ErrInvalidParams}, {rel: "canary", data: "x", err: api.ErrInvalidParams}}, nil},
		{"a symlink inside", []step{{rel: "in", data: "x", truncate: true, err: api.ErrInvalidParams}}, func(f *fixture) { expect(f, "a.txt", "hello") }},
		{"through a linked directory", []step{
			{rel: "abs/new", data: "x", truncate: true, err: api.ErrInvalidParams},
			{rel: "up/outside/canary.txt", data: "x", err: api.ErrInvalidParams},
		}, nil},
		{"a directory", []step{{rel: "d", data: "x", truncate: true, err: api.ErrInvalidParams}}, nil},
		{"under a file", []step{{rel: "a.txt/x", data: "x", truncate: true, err: api.ErrInvalidParams}}, nil},
		{"a FIFO", []step{{rel: "pipe", data: "x", truncate: true, err: api.ErrDenied}, {rel: "pipe", data: "x", err: api.ErrDenied}}, nil},
		{"a hard link of the canary", []step{{rel: "hl", data: "x", truncate: true, err: api.ErrDenied}}, nil},
		{"excluded", []step{
			{rel: ".env", data: "x", truncate: true, err: api.ErrDenied},
			{rel: ".git/config", data: "x", truncate: true, err: api.ErrDenied},
			{rel: "a.txt", data: "x", truncate: true, o: Options{Excludes: []string{"*.txt"}}, err: api.ErrDenied},
			{rel: ".env", data: "x", truncate: true, o: Options{Excludes: []string{}}, size: 1},
		}, func(f *fixture) {
			gone(f, ".git")
			expect(f, "a.txt", "hello")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, w := hostile(t)
			if err := os.Chmod(f.path("a.txt"), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, s := range c.steps {
				within(t, func() {
					size, err := w.WriteAt(s.rel, s.off, []byte(s.data), s.truncate, s.perm, s.o)
					wantKind(t, "WriteAt("+s.rel+")", err, s.err)
					if s.err == nil && size != s.size {
						t.Errorf("WriteAt(%q) = size %d, want %d", s.rel, size, s.size)
					}
				})
			}
			if c.check != nil {
				c.check(f)
			}
			if data, _ := os.ReadFile(f.path("hl")); string(data) != canaryData {
				t.Error("the hard link of the canary changed")
			}
		})
	}
}

func mode(f *fixture, rel string, want os.FileMode) {
	f.t.Helper()
	st, err := os.Lstat(f.path(rel))
	if err != nil || st.Mode().Perm() != want {
		f.t.Errorf("%s: mode %v, %v; want %v", rel, st.Mode(), err, want)
	}
}

func TestWriteAtQuota(t *testing.T) {
	f := newFixture(t)
	f.file("a.txt", "123456") // 6 bytes
	w := f.open()
	q := Options{Quota: 10}
	steps := []struct {
		rel      string
		off      int64
		data     string
		truncate bool
		err      error
	}{
		{rel: "b.txt", data: "12345", truncate: true, err: api.ErrLimitExceeded}, // 11
		{rel: "new/dir/b", data: "12345", truncate: true, err: api.ErrLimitExceeded},
		{rel: "a.txt", off: 6, data: "12345", err: api.ErrLimitExceeded},
		{rel: "a.txt", off: 2, data: "abcd"},     // in place: 6
		{rel: "a.txt", off: 2, data: "abcdefgh"}, // 10: at the quota
		{rel: "a.txt", off: 10, data: "x", err: api.ErrLimitExceeded},
		{rel: "a.txt", data: "1234", truncate: true},   // 4
		{rel: "b.txt", data: "12345", truncate: true},  // 9
		{rel: "b.txt", data: "123456", truncate: true}, // 10
		{rel: "c.txt", data: "", truncate: true},       // an empty file adds nothing
	}
	for _, s := range steps {
		_, err := w.WriteAt(s.rel, s.off, []byte(s.data), s.truncate, 0, q)
		wantKind(t, "WriteAt("+s.rel+")", err, s.err)
		if s.err != nil && !strings.Contains(err.Error(), "quota of 10 bytes") {
			t.Errorf("the error does not name the quota: %v", err)
		}
	}
	gone(f, "new")
	if b, n, err := w.Usage(); err != nil || b != 10 || n != 3 {
		t.Errorf("Usage = %d, %d, %v", b, n, err)
	}
}

func TestApplyQuota(t *testing.T) {
	f := newFixture(t)
	f.file("a.txt", "12345")
	f.file("old.txt", "1234")
	w := f.open()
	base, err := w.Snapshot(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Used 9. In path order: old.txt deleted (5), a.txt shrinks (2),
	// b.txt (6), c.txt over (16), d.txt fits (8).
	rep, err := w.Apply(base, Changes{
		Written: []runtime.OutputFile{out("d.txt", "dd"), out("c.txt", "cccccccccc"), out("b.txt", "bbbb"), out("a.txt", "aa")},
		Deleted: []string{"old.txt"},
	}, true, Options{Quota: 12})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(changePaths(rep.Written), " "); got != "a.txt b.txt d.txt" {
		t.Errorf("written %s; refused:\n%s", got, findings(rep.Refused))
	}
	if !hasFinding(rep.Refused, "c.txt", "over its quota of 12 bytes") || len(rep.Refused) != 1 {
		t.Errorf("refused:\n%s", findings(rep.Refused))
	}
	gone(f, "c.txt")
	gone(f, "old.txt")
	if b, _, _ := w.Usage(); b != 8 {
		t.Errorf("usage %d", b)
	}
}

func TestUsage(t *testing.T) {
	f, w := hostile(t)
	// a.txt 5, d/x.txt 1, hl (hard link) len(canaryData); entries: a.txt abs
	// canary d d/x.txt empty hl in pipe up.
	b, n, err := w.Usage()
	if err != nil || b != int64(5+1+len(canaryData)) || n != 10 {
		t.Errorf("Usage = %d, %d, %v", b, n, err)
	}
	old := usageEntries
	usageEntries = 5
	defer func() { usageEntries = old }()
	_, _, err = w.Usage()
	wantKind(t, "Usage over the bound", err, api.ErrLimitExceeded)
	_ = f
}

func TestDelete(t *testing.T) {
	cases := []struct {
		rel       string
		recursive bool
		removed   int
		err       error
		gone      []string
		kept      []string
	}{
		{rel: "a.txt", removed: 1, gone: []string{"a.txt"}, kept: []string{"in"}},
		{rel: "in", removed: 1, gone: []string{"in"}, kept: []string{"a.txt"}},
		{rel: "canary", removed: 1, gone: []string{"canary"}},
		{rel: "abs", recursive: true, removed: 1, gone: []string{"abs"}},
		{rel: "up", recursive: true, removed: 1, gone: []string{"up"}, kept: []string{"a.txt", "d/x.txt"}},
		{rel: "hl", removed: 1, gone: []string{"hl"}},
		{rel: "pipe", removed: 1, gone: []string{"pipe"}},
		{rel: "empty", removed: 1, gone: []string{"empty"}},
		{rel: "d", err: api.ErrInvalidParams, kept: []string{"d/x.txt"}},
		{rel: "d/", recursive: true, removed: 5, gone: []string{"d"}, kept: []string{"a.txt"}},
		{rel: "missing", err: api.ErrNotFound},
		{rel: "up/outside/canary.txt", err: api.ErrInvalidParams},
		{rel: "abs/canary.txt", err: api.ErrInvalidParams},
		{rel: "in/x", err: api.ErrInvalidParams},
	}
	for _, c := range cases {
		t.Run(c.rel, func(t *testing.T) {
			f, w := hostile(t)
			f.symlink("d/sub/out", "../../../outside")
			f.file("d/sub/y", "y")
			n, err := w.Delete(c.rel, c.recursive)
			wantKind(t, "Delete", err, c.err)
			if n != c.removed {
				t.Errorf("Delete(%q) removed %d, want %d", c.rel, n, c.removed)
			}
			for _, g := range c.gone {
				gone(f, g)
			}
			for _, k := range c.kept {
				if _, err := os.Lstat(f.path(k)); err != nil {
					t.Errorf("%s: %v", k, err)
				}
			}
		})
	}
}

// A directory swapped for a link between calls, or while a recursive
// Delete is under way, never sends a read, a write or a deletion out.
func TestFilesSwappedDirectory(t *testing.T) {
	f := newFixture(t)
	f.file("d/x", "x")
	f.file("t/sub/deep/y", "y")
	f.file("t/z", "z")
	w := f.open()
	if es, _, err := w.List("d", false, 0); err != nil || len(es) != 1 {
		t.Fatalf("List = %v, %v", es, err)
	}
	swap := func(rel string) {
		if err := os.Rename(f.path(rel), filepath.Join(f.t.(*testing.T).TempDir(), "moved")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(f.outside, f.path(rel)); err != nil {
			t.Fatal(err)
		}
	}
	swap("d")
	if _, _, err := w.List("d", false, 0); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("List through the link = %v", err)
	}
	if _, _, _, err := w.ReadAt("d/canary.txt", 0, 0); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("ReadAt through the link = %v", err)
	}
	if _, err := w.WriteAt("d/canary.txt", 0, []byte("x"), true, 0, Options{}); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("WriteAt through the link = %v", err)
	}
	if _, err := w.WriteAt("d/x", 0, []byte("x"), true, 0, Options{}); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("WriteAt through the link = %v", err)
	}
	if n, err := w.Delete("d", true); err != nil || n != 1 {
		t.Errorf("Delete of the link = %d, %v", n, err)
	}

	// Mid-way: t/sub becomes a link to outside once Delete reaches it.
	w.raced = func(rel string) {
		if rel == "t/sub" {
			swap("t/sub")
		}
	}
	defer func() { w.raced = nil }()
	n, err := w.Delete("t", true)
	if err != nil || n != 3 { // t/sub (the link), t/z, t
		t.Errorf("Delete = %d, %v", n, err)
	}
	gone(f, "t")
}

// FuzzFilesPaths: whatever path a caller gives the files API, nothing
// outside the workspace is read, written or deleted, nothing hangs on a
// FIFO, and every error is of a kind a caller acts on.
func FuzzFilesPaths(f *testing.F) {
	for _, s := range []string{
		"", ".", "a.txt", "d", "d/", "d/x.txt", "..", "../outside/canary.txt", "/etc/passwd", "up/outside/canary.txt",
		"abs/canary.txt", "abs", "canary", "in", "pipe", "hl", "up", "new/file", ".git/config", "a.txt/x", "d//x", "\x00",
	} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, rel string, recursive bool) {
		fx, w := hostile(t)
		check := func(op string, err error) {
			if err == nil {
				return
			}
			switch api.KindOf(err) {
			case api.KindInvalidParams, api.KindNotFound, api.KindDenied, api.KindLimitExceeded:
			default:
				t.Fatalf("%s(%q) = %v: not of a caller's kind", op, rel, err)
			}
		}
		if _, _, err := w.Usage(); err != nil { // a count kept, which the calls below must keep right
			t.Fatal(err)
		}
		within(t, func() {
			es, _, err := w.List(rel, recursive, 0)
			check("List", err)
			for _, e := range es {
				if _, err := os.Lstat(fx.path(e.Path)); err != nil {
					t.Fatalf("List(%q) gave %q, not in the workspace", rel, e.Path)
				}
			}
			_, err = w.Stat(rel)
			check("Stat", err)
			data, _, _, err := w.ReadAt(rel, 0, 0)
			check("ReadAt", err)
			if strings.Contains(string(data), "canary") {
				t.Fatalf("ReadAt(%q) read the canary", rel)
			}
			_, err = w.WriteAt(rel, 0, []byte("fuzz"), true, 0, Options{})
			check("WriteAt", err)
			if err == nil {
				if got, err := os.ReadFile(fx.path(rel)); err != nil || string(got) != "fuzz" {
					t.Fatalf("WriteAt(%q) wrote elsewhere: %q, %v", rel, got, err)
				}
			}
			_, err = w.Delete(rel, recursive)
			check("Delete", err)
		})
		keptMatches(t, w, fmt.Sprintf("after the calls on %q", rel))
		data, err := os.ReadFile(fx.canary)
		if err != nil || string(data) != canaryData {
			t.Fatalf("canary changed by %q", rel)
		}
		if ents, err := os.ReadDir(fx.outside); err != nil || len(ents) != 1 {
			t.Fatalf("%q changed outside the workspace: %v", rel, ents)
		}
		var st unix.Stat_t
		if err := unix.Stat(fx.canary, &st); err != nil || st.Nlink != 1 && st.Nlink != 2 {
			t.Fatalf("canary links: %d", st.Nlink)
		}
	})
}
