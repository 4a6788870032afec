package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

func out(rel, data string) runtime.OutputFile {
	return runtime.OutputFile{Path: rel, Size: int64(len(data)), SHA256: sum([]byte(data)), Data: []byte(data)}
}

func changePaths(cs []api.WorkspaceChange) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}

func TestApply(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		name := "renameat2"
		if fallback {
			name = "no renameat2"
		}
		t.Run(name, func(t *testing.T) { testApply(t, fallback) })
	}
}

// testApply runs the cases the way Apply takes with renameat2's flags or,
// with fallback, without them.
func testApply(t *testing.T, fallback bool) {
	for _, tc := range []struct {
		name        string
		setup       func(f *fixture)
		inputs      []string
		between     func(f *fixture)             // the host changes things while the run runs
		raced       func(f *fixture, rel string) // the host writes during the write-back
		changes     Changes
		allowDelete bool
		opts        Options
		written     []string
		deleted     []string
		conflicts   map[string]string
		refused     map[string]string
		check       func(f *fixture)
	}{
		{
			name:    "replace a file, keeping its mode",
			setup:   func(f *fixture) { f.fileMode("doc.txt", "old", 0o600) },
			changes: Changes{Written: []runtime.OutputFile{out("doc.txt", "new")}},
			written: []string{"doc.txt"},
			check: func(f *fixture) {
				if got := f.read("doc.txt"); got != "new" {
					f.t.Errorf("doc.txt = %q", got)
				}
				if st, _ := os.Stat(f.path("doc.txt")); st.Mode().Perm() != 0o600 {
					f.t.Errorf("mode = %v, want 0600", st.Mode())
				}
			},
		},
		{
			name:    "unchanged file",
			setup:   func(f *fixture) { f.file("doc.txt", "same") },
			changes: Changes{Written: []runtime.OutputFile{out("doc.txt", "same")}},
			written: []string{},
		},
		{
			name:    "new file in new directories",
			setup:   func(f *fixture) { f.file("a", "a") },
			changes: Changes{Written: []runtime.OutputFile{out("out/deep/new.txt", "new")}},
			written: []string{"out/deep/new.txt"},
			check: func(f *fixture) {
				if got := f.read("out/deep/new.txt"); got != "new" {
					f.t.Errorf("new.txt = %q", got)
				}
				for p, want := range map[string]os.FileMode{"out": 0o755 | os.ModeDir, "out/deep": 0o755 | os.ModeDir, "out/deep/new.txt": 0o644} {
					if st, err := os.Lstat(f.path(p)); err != nil || st.Mode() != want {
						f.t.Errorf("%s: %v %v, want %v", p, st.Mode(), err, want)
					}
				}
			},
		},
		{
			name:    "new file already there with the same content",
			setup:   func(f *fixture) { f.file("a", "a") },
			inputs:  []string{"a"},
			between: func(f *fixture) { f.file("b", "b") },
			changes: Changes{Written: []runtime.OutputFile{out("b", "b")}},
			written: []string{},
		},
		{
			name:      "new file made on the host meanwhile",
			setup:     func(f *fixture) { f.file("a", "a") },
			between:   func(f *fixture) { f.file("b", "host") },
			changes:   Changes{Written: []runtime.OutputFile{out("b", "run")}},
			conflicts: map[string]string{"b": "the host has a file there that the run was not given"},
			check:     func(f *fixture) { expect(f, "b", "host") },
		},
		{
			name:      "file not among the inputs",
			setup:     func(f *fixture) { f.file("a", "a"); f.file("b", "host") },
			inputs:    []string{"a"},
			changes:   Changes{Written: []runtime.OutputFile{out("b", "run")}},
			conflicts: map[string]string{"b": "not among its inputs"},
			check:     func(f *fixture) { expect(f, "b", "host") },
		},
		{
			name:      "changed on the host since the snapshot",
			setup:     func(f *fixture) { f.file("doc.txt", "old") },
			between:   func(f *fixture) { f.file("doc.txt", "host edit") },
			changes:   Changes{Written: []runtime.OutputFile{out("doc.txt", "run edit")}},
			conflicts: map[string]string{"doc.txt": "changed on the host since the run started; the host copy is kept"},
			check:     func(f *fixture) { expect(f, "doc.txt", "host edit") },
		},
		{
			name:      "deleted on the host since the snapshot",
			setup:     func(f *fixture) { f.file("doc.txt", "old") },
			between:   func(f *fixture) { os.Remove(f.path("doc.txt")) },
			changes:   Changes{Written: []runtime.OutputFile{out("doc.txt", "run edit")}},
			conflicts: map[string]string{"doc.txt": "deleted on the host"},
			check:     func(f *fixture) { gone(f, "doc.txt") },
		},
		{
			name:      "directory removed on the host since the snapshot",
			setup:     func(f *fixture) { f.file("d/doc.txt", "old") },
			between:   func(f *fixture) { os.RemoveAll(f.path("d")) },
			changes:   Changes{Written: []runtime.OutputFile{out("d/doc.txt", "run edit")}},
			conflicts: map[string]string{"d/doc.txt": "its directory was removed"},
			check:     func(f *fixture) { gone(f, "d") },
		},
		{
			name:  "host writer races the exchange",
			setup: func(f *fixture) { f.file("doc.txt", "old") },
			raced: func(f *fixture, rel string) {
				// Written in place, as an editor that does not rename would.
				if err := os.WriteFile(f.path(rel), []byte("racing host edit"), 0o644); err != nil {
					f.t.Error(err)
				}
			},
			changes:   Changes{Written: []runtime.OutputFile{out("doc.txt", "run edit")}},
			conflicts: map[string]string{"doc.txt": "changed on the host while it was written back; the host copy is kept"},
			check:     func(f *fixture) { expect(f, "doc.txt", "racing host edit") },
		},
		{
			name:  "host creates the file during the write-back",
			setup: func(f *fixture) { f.file("a", "a") },
			raced: func(f *fixture, rel string) {
				if err := os.WriteFile(f.path(rel), []byte("host"), 0o644); err != nil {
					f.t.Error(err)
				}
			},
			changes:   Changes{Written: []runtime.OutputFile{out("new.txt", "run")}},
			conflicts: map[string]string{"new.txt": "the host has a file there"},
			check:     func(f *fixture) { expect(f, "new.txt", "host") },
		},
		{
			name:    "replace a symlink by a file",
			setup:   func(f *fixture) { f.file("t", "target"); f.symlink("l", "t") },
			changes: Changes{Written: []runtime.OutputFile{out("l", "file now")}},
			written: []string{"l"},
			check: func(f *fixture) {
				if st, err := os.Lstat(f.path("l")); err != nil || !st.Mode().IsRegular() {
					f.t.Errorf("l: %v %v", st, err)
				}
				expect(f, "l", "file now")
				expect(f, "t", "target")
			},
		},
		{
			name:      "a file swapped for a symlink to outside",
			setup:     func(f *fixture) { f.file("doc.txt", "old") },
			between:   func(f *fixture) { os.Remove(f.path("doc.txt")); f.symlink("doc.txt", f.canary) },
			changes:   Changes{Written: []runtime.OutputFile{out("doc.txt", "run edit")}},
			conflicts: map[string]string{"doc.txt": "changed on the host"},
		},
		{
			name:  "a directory swapped for a symlink to outside",
			setup: func(f *fixture) { f.file("d/doc.txt", "old") },
			between: func(f *fixture) {
				if err := os.Rename(f.path("d"), f.path("d.old")); err != nil {
					f.t.Fatal(err)
				}
				f.symlink("d", f.outside)
			},
			changes: Changes{Written: []runtime.OutputFile{out("d/doc.txt", "run edit"), out("d/canary.txt", "pwned"), out("d/new.txt", "x")}},
			refused: map[string]string{
				"d/doc.txt":    `"d" is a symlink on the host; not followed`,
				"d/canary.txt": `"d" is a symlink on the host; not followed`,
				"d/new.txt":    `"d" is a symlink on the host; not followed`,
			},
			check: func(f *fixture) { expect(f, "d.old/doc.txt", "old") },
		},
		{
			name:    "a new file under a symlink",
			setup:   func(f *fixture) { f.symlink("up", "..") },
			changes: Changes{Written: []runtime.OutputFile{out("up/outside/canary.txt", "pwned"), out("up/x", "x")}},
			refused: map[string]string{"up/outside/canary.txt": `"up" is a symlink on the host; not followed`, "up/x": "symlink"},
		},
		{
			name:    "a new file under a file",
			setup:   func(f *fixture) { f.file("a", "a") },
			changes: Changes{Written: []runtime.OutputFile{out("a/b", "b")}},
			refused: map[string]string{"a/b": `"a" is a regular file on the host, not a directory`},
		},
		{
			name:      "a new file over a FIFO",
			setup:     func(f *fixture) { f.file("a", "a"); f.fifo("p") },
			changes:   Changes{Written: []runtime.OutputFile{out("p", "x")}},
			conflicts: map[string]string{"p": "named pipe (FIFO)"},
		},
		{
			name:    "a new file under a FIFO",
			setup:   func(f *fixture) { f.fifo("p") },
			changes: Changes{Written: []runtime.OutputFile{out("p/x", "x")}},
			refused: map[string]string{"p/x": `"p" is a named pipe (FIFO) on the host, not a directory`},
		},
		{
			name:    "hostile paths",
			setup:   func(f *fixture) { f.file("a", "a") },
			changes: Changes{Written: []runtime.OutputFile{out("../outside/canary.txt", "pwned"), out("/etc/x", "x"), out("a/./b", "x"), out("bad\x00", "x")}},
			refused: map[string]string{"../outside/canary.txt": `".."`, "/etc/x": "absolute", "a/./b": `"."`, "bad\x00": "control character"},
		},
		{
			name:    "excluded paths",
			setup:   func(f *fixture) { f.file("a", "a") },
			changes: Changes{Written: []runtime.OutputFile{out(".git/hooks/pre-commit", "x"), out("sub/.env", "x"), out("k.pem", "x"), out("sub/.git", "gitdir: /tmp")}},
			refused: map[string]string{
				".git/hooks/pre-commit": `pattern ".git/"`, "sub/.env": `pattern ".env"`, "k.pem": `pattern "*.pem"`, "sub/.git": `pattern ".git/"`,
			},
			check: func(f *fixture) { gone(f, ".git"); gone(f, "sub") },
		},
		{
			name:    "over the file cap",
			setup:   func(f *fixture) { f.file("a", "a") },
			opts:    Options{Caps: Caps{FileBytes: 3}},
			changes: Changes{Written: []runtime.OutputFile{out("big", "four"), out("ok", "ok")}},
			written: []string{"ok"},
			refused: map[string]string{"big": "over the 3-byte cap on one file"},
		},
		{
			name:    "corrupt output",
			setup:   func(f *fixture) { f.file("a", "a") },
			changes: Changes{Written: []runtime.OutputFile{{Path: "x", SHA256: sum([]byte("other")), Data: []byte("x")}}},
			refused: map[string]string{"x": "does not match its SHA-256"},
		},
		{
			name:    "twice",
			setup:   func(f *fixture) { f.file("a", "a") },
			changes: Changes{Written: []runtime.OutputFile{out("x", "1"), out("x", "2")}},
			written: []string{"x"},
			refused: map[string]string{"x": "changed twice"},
			check:   func(f *fixture) { expect(f, "x", "1") },
		},
		{
			name:    "a directory is not replaced by a file",
			setup:   func(f *fixture) { f.file("d/x", "x") },
			changes: Changes{Written: []runtime.OutputFile{out("d", "file")}},
			refused: map[string]string{"d": "was a directory"},
		},
		{
			name:        "delete",
			setup:       func(f *fixture) { f.file("a", "a"); f.file("b", "b") },
			changes:     Changes{Deleted: []string{"a"}},
			allowDelete: true,
			deleted:     []string{"a"},
			check:       func(f *fixture) { gone(f, "a"); expect(f, "b", "b") },
		},
		{
			name:    "delete not allowed",
			setup:   func(f *fixture) { f.file("a", "a") },
			changes: Changes{Deleted: []string{"a"}},
			refused: map[string]string{"a": "deleting is not allowed by policy"},
			check:   func(f *fixture) { expect(f, "a", "a") },
		},
		{
			name:        "delete a file changed on the host",
			setup:       func(f *fixture) { f.file("a", "a") },
			between:     func(f *fixture) { f.file("a", "host edit") },
			changes:     Changes{Deleted: []string{"a"}},
			allowDelete: true,
			conflicts:   map[string]string{"a": "changed on the host since the run started; the host copy is kept, not deleted"},
			check:       func(f *fixture) { expect(f, "a", "host edit") },
		},
		{
			name:  "delete raced by a host writer",
			setup: func(f *fixture) { f.file("a", "a") },
			raced: func(f *fixture, rel string) {
				if err := os.WriteFile(f.path(rel), []byte("racing host edit"), 0o644); err != nil {
					f.t.Error(err)
				}
			},
			changes:     Changes{Deleted: []string{"a"}},
			allowDelete: true,
			conflicts:   map[string]string{"a": "changed on the host while it was deleted; the host copy is kept"},
			check:       func(f *fixture) { expect(f, "a", "racing host edit") },
		},
		{
			name:        "delete a symlink, not what it points to",
			setup:       func(f *fixture) { f.file("t", "target"); f.symlink("l", "t") },
			changes:     Changes{Deleted: []string{"l"}},
			allowDelete: true,
			deleted:     []string{"l"},
			check:       func(f *fixture) { gone(f, "l"); expect(f, "t", "target") },
		},
		{
			name:  "delete a file swapped for a symlink to outside",
			setup: func(f *fixture) { f.file("a", "a") },
			between: func(f *fixture) {
				os.Remove(f.path("a"))
				f.symlink("a", f.canary)
			},
			changes:     Changes{Deleted: []string{"a"}},
			allowDelete: true,
			conflicts:   map[string]string{"a": "changed on the host"},
		},
		{
			name:        "delete under a swapped directory",
			setup:       func(f *fixture) { f.file("d/canary.txt", "x") },
			between:     func(f *fixture) { os.RemoveAll(f.path("d")); f.symlink("d", f.outside) },
			changes:     Changes{Deleted: []string{"d/canary.txt"}},
			allowDelete: true,
			refused:     map[string]string{"d/canary.txt": `"d" is a symlink on the host; not followed`},
		},
		{
			name:        "delete what the run was not given",
			setup:       func(f *fixture) { f.file("a", "a"); f.file("b", "b") },
			inputs:      []string{"a"},
			changes:     Changes{Deleted: []string{"b", "../outside/canary.txt", ".env"}},
			allowDelete: true,
			refused:     map[string]string{"b": "was not given to the run", "../outside/canary.txt": `".."`, ".env": `pattern ".env"`},
			check:       func(f *fixture) { expect(f, "b", "b") },
		},
		{
			name:        "delete a directory",
			setup:       func(f *fixture) { f.dir("d") },
			changes:     Changes{Deleted: []string{"d"}},
			allowDelete: true,
			refused:     map[string]string{"d": "directories are not deleted"},
		},
		{
			name:        "delete what the host deleted too",
			setup:       func(f *fixture) { f.file("a", "a") },
			between:     func(f *fixture) { os.Remove(f.path("a")) },
			changes:     Changes{Deleted: []string{"a"}},
			allowDelete: true,
		},
		{
			name:        "deleted and written again",
			setup:       func(f *fixture) { f.file("a", "a") },
			changes:     Changes{Deleted: []string{"a"}, Written: []runtime.OutputFile{out("a", "again")}},
			allowDelete: true,
			written:     []string{"a"},
			check:       func(f *fixture) { expect(f, "a", "again") },
		},
		{
			name:        "a file replaced by a directory",
			setup:       func(f *fixture) { f.file("a", "a") },
			changes:     Changes{Deleted: []string{"a"}, Written: []runtime.OutputFile{out("a/b", "b")}},
			allowDelete: true,
			deleted:     []string{"a"},
			written:     []string{"a/b"},
			check:       func(f *fixture) { expect(f, "a/b", "b") },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			w := f.open()
			base, err := w.Snapshot(tc.inputs, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if tc.between != nil {
				tc.between(f)
			}
			if tc.raced != nil {
				w.raced = func(rel string) { tc.raced(f, rel) }
			}
			w.noRenameat2 = fallback
			var rep *Report
			within(t, func() { rep, err = w.Apply(base, tc.changes, tc.allowDelete, tc.opts) })
			if err != nil {
				t.Fatal(err)
			}
			if tc.written == nil {
				tc.written = []string{}
			}
			if got := changePaths(rep.Written); !slices.Equal(got, tc.written) {
				t.Errorf("written = %q, want %q", got, tc.written)
			}
			if tc.deleted == nil {
				tc.deleted = []string{}
			}
			if got := changePaths(rep.Deleted); !slices.Equal(got, tc.deleted) {
				t.Errorf("deleted = %q, want %q", got, tc.deleted)
			}
			for _, c := range []struct {
				what string
				got  []api.WorkspaceFinding
				want map[string]string
			}{{"conflicts", rep.Conflicts, tc.conflicts}, {"refused", rep.Refused, tc.refused}} {
				if len(c.got) != len(c.want) {
					t.Errorf("%s:\n%s", c.what, findings(c.got))
				}
				for p, why := range c.want {
					if !hasFinding(c.got, p, why) {
						t.Errorf("%q not in %s with %q:\n%s", p, c.what, why, findings(c.got))
					}
				}
			}
			if tc.check != nil {
				tc.check(f)
			}
			f.noTemp()
		})
	}
}

func expect(f *fixture, rel, want string) {
	f.t.Helper()
	if got := f.read(rel); got != want {
		f.t.Errorf("%s = %q, want %q", rel, got, want)
	}
}

func gone(f *fixture, rel string) {
	f.t.Helper()
	if _, err := os.Lstat(f.path(rel)); !errors.Is(err, os.ErrNotExist) {
		f.t.Errorf("%s is there: %v", rel, err)
	}
}

func TestApplyReport(t *testing.T) {
	f := newFixture(t)
	f.file("a", "old")
	f.file("b", "bye")
	w := f.open()
	base, err := w.Snapshot(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := w.Apply(base, Changes{Written: []runtime.OutputFile{out("a", "new"), out("c", "sea")}, Deleted: []string{"b"}}, true, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Report{
		Written: []api.WorkspaceChange{
			{Path: "a", Before: sum([]byte("old")), After: sum([]byte("new")), Size: 3},
			{Path: "c", After: sum([]byte("sea")), Size: 3},
		},
		Deleted:   []api.WorkspaceChange{{Path: "b", Before: sum([]byte("bye"))}},
		Conflicts: []api.WorkspaceFinding{},
		Refused:   []api.WorkspaceFinding{},
	}
	if !slices.Equal(rep.Written, want.Written) || !slices.Equal(rep.Deleted, want.Deleted) || len(rep.Conflicts)+len(rep.Refused) != 0 {
		t.Errorf("report = %+v\nwant     %+v", rep, want)
	}
	// Applying the same changes again against the same base: a is now the
	// run's own content, so nothing is to do; b is gone on the host too.
	rep, err = w.Apply(base, Changes{Written: []runtime.OutputFile{out("c", "sea")}, Deleted: []string{"b"}}, true, Options{})
	if err != nil || len(rep.Written)+len(rep.Deleted)+len(rep.Conflicts)+len(rep.Refused) != 0 {
		t.Errorf("second apply = %+v, %v", rep, err)
	}
}

func TestApplyOwner(t *testing.T) {
	f := newFixture(t)
	f.file("a", "a")
	w := f.open()
	base, err := w.Snapshot(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Not root: the one owner a test may give is its own.
	owner := &Owner{UID: os.Getuid(), GID: os.Getgid()}
	if os.Getuid() == 0 {
		owner = &Owner{UID: 12345, GID: 23456}
	}
	rep, err := w.Apply(base, Changes{Written: []runtime.OutputFile{out("d/new", "n")}}, false, Options{Owner: owner})
	if err != nil || len(rep.Written) != 1 {
		t.Fatalf("Apply = %+v, %v", rep, err)
	}
	for _, p := range []string{"d", "d/new"} {
		var st unix.Stat_t
		if err := unix.Lstat(f.path(p), &st); err != nil {
			t.Fatal(err)
		}
		if int(st.Uid) != owner.UID || int(st.Gid) != owner.GID {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, owner.UID, owner.GID)
		}
	}
}

func TestApplyNilBase(t *testing.T) {
	f := newFixture(t)
	f.file("a", "host")
	rep, err := f.open().Apply(nil, Changes{Written: []runtime.OutputFile{out("a", "run"), out("b", "b")}}, true, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changePaths(rep.Written), []string{"b"}) || !hasFinding(rep.Conflicts, "a", "the host has a file there") {
		t.Errorf("report = %+v", rep)
	}
	expect(f, "a", "host")
}

func TestApplyInvalidExclude(t *testing.T) {
	f := newFixture(t)
	if _, err := f.open().Apply(nil, Changes{}, false, Options{Excludes: []string{"/abs"}}); !errors.Is(err, api.ErrInvalidParams) {
		t.Fatalf("Apply with an invalid exclude = %v", err)
	}
}

// TestApplyRemovedWorkspace: a workspace removed from under an open
// Workspace is unusable, an error rather than findings.
func TestApplyRemovedWorkspace(t *testing.T) {
	f := newFixture(t)
	w := f.open()
	if err := os.Remove(f.ws); err != nil {
		t.Fatal(err)
	}
	_, err := w.Apply(nil, Changes{Written: []runtime.OutputFile{out("a", "a")}}, false, Options{})
	if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("Apply = %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a written: %v", err)
	}
}
