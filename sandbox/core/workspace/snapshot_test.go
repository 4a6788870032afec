package workspace

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

func names(s *Snapshot) []string {
	var out []string
	for _, f := range s.Files {
		out = append(out, f.Name)
	}
	return out
}

// project is a small tree with something of everything.
func project(f *fixture) {
	f.file("README.md", "# readme\n")
	f.fileMode("run.sh", "#!/bin/sh\n", 0o750)
	f.file("docs/guide.md", "guide\n")
	f.file("docs/deep/notes.md", "notes\n")
	f.file("docs/deep/data.txt", "data\n")
	f.file("src/main.go", "package main\n")
	f.file(".git/config", "[core]\n")
	f.file(".env", "SECRET=1\n")
	f.file("keys/server.pem", "-----BEGIN-----\n")
	f.dir("empty")
	f.symlink("docs/latest.md", "guide.md")
}

func TestOpen(t *testing.T) {
	f := newFixture(t)
	f.file("a.txt", "a")
	if err := os.Symlink(f.ws, filepath.Join(f.outside, "keep-link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		kind      error
		want      string
	}{
		{"missing", filepath.Join(f.ws, "nope"), api.ErrNotFound, "does not exist"},
		{"file", f.path("a.txt"), api.ErrInvalidParams, "not a directory"},
		{"empty", "", api.ErrInvalidParams, "empty"},
		{"nul", "a\x00b", api.ErrInvalidParams, "NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Open(tc.dir)
			if err == nil {
				w.Close()
				t.Fatalf("Open(%q) succeeded", tc.dir)
			}
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%q) = %v, want %v containing %q", tc.dir, err, tc.kind, tc.want)
			}
		})
	}
	t.Run("symlink resolved once", func(t *testing.T) {
		w, err := Open(filepath.Join(f.outside, "keep-link"))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if w.Dir() != f.ws {
			t.Errorf("Dir() = %q, want %q", w.Dir(), f.ws)
		}
		s, err := w.Snapshot(nil, Options{})
		if err != nil || !slices.Equal(names(s), []string{"a.txt"}) {
			t.Errorf("Snapshot = %v, %v", names(s), err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		w := f.open()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Snapshot(nil, Options{}); !errors.Is(err, api.ErrUnavailable) {
			t.Errorf("Snapshot after Close = %v", err)
		}
		if _, err := w.Apply(nil, Changes{}, false, Options{}); !errors.Is(err, api.ErrUnavailable) {
			t.Errorf("Apply after Close = %v", err)
		}
		if err := w.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
	})
}

func TestSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inputs   []string
		excludes []string
		want     []string
		excluded int
		refused  map[string]string // path -> words of why
	}{
		{
			name: "whole tree",
			want: []string{"README.md", "docs", "docs/deep", "docs/deep/data.txt", "docs/deep/notes.md",
				"docs/guide.md", "docs/latest.md", "empty", "keys", "run.sh", "src", "src/main.go"},
			excluded: 3, // .env, .git, keys/server.pem
		},
		{
			name:     "no excludes",
			excludes: []string{},
			want: []string{".env", ".git", ".git/config", "README.md", "docs", "docs/deep", "docs/deep/data.txt", "docs/deep/notes.md",
				"docs/guide.md", "docs/latest.md", "empty", "keys", "keys/server.pem", "run.sh", "src", "src/main.go"},
		},
		{name: "one file", inputs: []string{"docs/guide.md"}, want: []string{"docs/guide.md"}},
		{name: "a directory", inputs: []string{"docs/deep"}, want: []string{"docs/deep", "docs/deep/data.txt", "docs/deep/notes.md"}},
		{name: "a directory with slash", inputs: []string{"docs/deep/"}, want: []string{"docs/deep", "docs/deep/data.txt", "docs/deep/notes.md"}},
		{name: "a symlink", inputs: []string{"docs/latest.md"}, want: []string{"docs/latest.md"}},
		{name: "overlapping", inputs: []string{"docs/deep/notes.md", "docs/deep"}, want: []string{"docs/deep/notes.md", "docs/deep", "docs/deep/data.txt"}},
		{name: "glob base name", inputs: []string{"*.md"}, want: []string{"README.md", "docs/deep/notes.md", "docs/guide.md", "docs/latest.md"}},
		{name: "glob anchored", inputs: []string{"docs/*.md"}, want: []string{"docs/guide.md", "docs/latest.md"}},
		{name: "glob double star", inputs: []string{"docs/**/*.txt"}, want: []string{"docs/deep/data.txt"}},
		{name: "glob and literal", inputs: []string{"src/main.go", "docs/deep/*"}, want: []string{"src/main.go", "docs/deep/data.txt", "docs/deep/notes.md"}},
		{
			name:    "explicit excluded",
			inputs:  []string{".env", ".git/config", "keys/server.pem", "README.md"},
			want:    []string{"README.md"},
			refused: map[string]string{".env": `pattern ".env"`, ".git/config": `pattern ".git/"`, "keys/server.pem": `pattern "*.pem"`},
		},
		{
			name:     "glob only excluded",
			inputs:   []string{"*.pem", "README.md"},
			want:     []string{"README.md"},
			excluded: 1,
			refused:  map[string]string{"*.pem": "matches only excluded paths"},
		},
		{name: "policy excludes", inputs: []string{"docs"}, excludes: []string{"deep/"}, want: []string{"docs", "docs/guide.md", "docs/latest.md"}, excluded: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			project(f)
			s, err := f.open().Snapshot(tc.inputs, Options{Excludes: tc.excludes})
			if err != nil {
				t.Fatal(err)
			}
			if got := names(s); !slices.Equal(got, tc.want) {
				t.Errorf("files = %q\nwant    %q", got, tc.want)
			}
			if s.Excluded != tc.excluded {
				t.Errorf("Excluded = %d, want %d", s.Excluded, tc.excluded)
			}
			if len(s.Refused) != len(tc.refused) {
				t.Errorf("refused:\n%s", findings(s.Refused))
			}
			for p, why := range tc.refused {
				if !hasFinding(s.Refused, p, why) {
					t.Errorf("%s not refused with %q:\n%s", p, why, findings(s.Refused))
				}
			}
			if err := runtime.ValidateInputs(s.Files, 1<<30); err != nil {
				t.Errorf("the snapshot is not valid input: %v", err)
			}
			if len(s.Entries) != len(s.Files) {
				t.Errorf("%d entries for %d files", len(s.Entries), len(s.Files))
			}
		})
	}
}

func TestSnapshotEntries(t *testing.T) {
	f := newFixture(t)
	project(f)
	s, err := f.open().Snapshot(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]runtime.InputFile{}
	for _, in := range s.Files {
		byName[in.Name] = in
	}
	run := byName["run.sh"]
	if string(run.Data) != "#!/bin/sh\n" || run.Mode != 0o750 || run.EffectiveKind() != runtime.InputRegular {
		t.Errorf("run.sh = %+v", run)
	}
	e := s.Entries["run.sh"]
	if e.SHA256 != sum([]byte("#!/bin/sh\n")) || e.Size != 10 || e.Mode != 0o750 || e.Kind != runtime.InputRegular {
		t.Errorf("entry run.sh = %+v", e)
	}
	if l := byName["docs/latest.md"]; l.Kind != runtime.InputSymlink || l.Target != "guide.md" || len(l.Data) != 0 {
		t.Errorf("docs/latest.md = %+v", l)
	}
	if e := s.Entries["docs/latest.md"]; e.Target != "guide.md" || e.Kind != runtime.InputSymlink {
		t.Errorf("entry docs/latest.md = %+v", e)
	}
	if d := byName["empty"]; d.Kind != runtime.InputDir || d.Mode != 0o755 {
		t.Errorf("empty = %+v", d)
	}
}

// TestSnapshotHostile: what a workspace may hold to get a run to read
// outside it, or to hang the reader. Each is refused or an error, and the
// canary is untouched (newFixture checks it).
func TestSnapshotHostile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(f *fixture)
		inputs  []string
		want    []string          // files taken
		refused map[string]string // path -> words of why
		err     error             // kind of error
		errText string
	}{
		{
			name:    "symlink absolute",
			setup:   func(f *fixture) { f.symlink("l", f.canary) },
			want:    []string{},
			refused: map[string]string{"l": "absolute path"},
		},
		{
			name:    "symlink climbing out",
			setup:   func(f *fixture) { f.symlink("sub/l", "../../outside/canary.txt") },
			want:    []string{"sub"},
			refused: map[string]string{"sub/l": "outside the workspace"},
		},
		{
			name:    "symlink climbing out named",
			setup:   func(f *fixture) { f.symlink("sub/l", "../../outside/canary.txt") },
			inputs:  []string{"sub/l"},
			want:    []string{},
			refused: map[string]string{"sub/l": "outside the workspace"},
		},
		{
			name:   "symlink climbing and back in",
			setup:  func(f *fixture) { f.file("a", "a"); f.symlink("sub/l", "../sub/../a") },
			inputs: []string{"sub/l"},
			want:   []string{"sub/l"},
		},
		{
			name:    "through a symlinked directory",
			setup:   func(f *fixture) { f.symlink("d", "../outside") },
			inputs:  []string{"d/canary.txt"},
			want:    []string{},
			refused: map[string]string{"d/canary.txt": `"d" is a symlink on the host; not followed`},
		},
		{
			name:    "through an absolute symlinked directory",
			setup:   func(f *fixture) { f.symlink("d", f.outside) },
			inputs:  []string{"d/"},
			want:    []string{},
			refused: map[string]string{"d": "absolute path"},
		},
		{
			name:    "fifo in the tree",
			setup:   func(f *fixture) { f.fifo("pipe"); f.file("a", "a") },
			want:    []string{"a"},
			refused: map[string]string{"pipe": "named pipe (FIFO)"},
		},
		{
			name:    "fifo named",
			setup:   func(f *fixture) { f.fifo("pipe") },
			inputs:  []string{"pipe"},
			want:    []string{},
			refused: map[string]string{"pipe": "named pipe (FIFO)"},
		},
		{
			name:    "fifo by glob",
			setup:   func(f *fixture) { f.fifo("pipe.txt") },
			inputs:  []string{"*.txt"},
			want:    []string{},
			refused: map[string]string{"pipe.txt": "named pipe (FIFO)"},
		},
		{
			name:    "through a fifo",
			setup:   func(f *fixture) { f.fifo("pipe") },
			inputs:  []string{"pipe/x"},
			want:    []string{},
			refused: map[string]string{"pipe/x": `"pipe" is a named pipe (FIFO) on the host, not a directory`},
		},
		{
			name: "hardlink to a file outside",
			setup: func(f *fixture) {
				secret := filepath.Join(f.outside, "keep-secret")
				if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
					f.t.Fatal(err)
				}
				if err := os.Link(secret, f.path("h")); err != nil {
					f.t.Fatal(err)
				}
			},
			want:    []string{},
			refused: map[string]string{"h": "2 hard links"},
		},
		{
			name:    "input with dotdot",
			inputs:  []string{"../outside/canary.txt"},
			err:     api.ErrInvalidParams,
			errText: `".."`,
		},
		{
			name:    "input absolute",
			inputs:  []string{filepath.Join("/", "etc", "passwd")},
			err:     api.ErrInvalidParams,
			errText: "absolute",
		},
		{
			name:    "input with a control character",
			inputs:  []string{"a\x00b"},
			err:     api.ErrInvalidParams,
			errText: "control character",
		},
		{
			name:    "input too long",
			inputs:  []string{strings.Repeat("abc/", 300)},
			err:     api.ErrInvalidParams,
			errText: "bytes long",
		},
		{
			name:    "input missing",
			setup:   func(f *fixture) { f.file("report.pdf", "%PDF") },
			inputs:  []string{"reprot.pdf"},
			err:     api.ErrNotFound,
			errText: `input "reprot.pdf" matches nothing in the workspace: check the path against a listing`,
		},
		{
			name:    "glob missing",
			setup:   func(f *fixture) { f.file("report.pdf", "%PDF") },
			inputs:  []string{"*.docx"},
			err:     api.ErrNotFound,
			errText: `"*.docx" matches nothing`,
		},
		{
			name:    "glob under an excluded directory",
			setup:   func(f *fixture) { f.file(".git/config", "c"); f.file("a", "a") },
			inputs:  []string{".git/*"},
			err:     api.ErrNotFound,
			errText: `matches nothing in the workspace outside excluded paths (".git" is excluded`,
		},
		{
			name:    "directory wanted, file found",
			setup:   func(f *fixture) { f.file("a", "a") },
			inputs:  []string{"a/"},
			err:     api.ErrInvalidParams,
			errText: "names a directory",
		},
		{
			name:    "file under a file",
			setup:   func(f *fixture) { f.file("a", "a") },
			inputs:  []string{"a/b"},
			want:    []string{},
			refused: map[string]string{"a/b": `"a" is a regular file on the host, not a directory`},
		},
		{
			name:    "name with a control character",
			setup:   func(f *fixture) { f.file("bad\nname", "x"); f.file("ok", "x") },
			want:    []string{"ok"},
			refused: map[string]string{"bad\nname": "control character"},
		},
		{
			name:    "outputs as a file",
			setup:   func(f *fixture) { f.file("outputs", "x") },
			want:    []string{},
			refused: map[string]string{"outputs": "reserved"},
		},
		{
			name:    "too deep",
			setup:   func(f *fixture) { f.file(strings.Repeat("d/", 32)+"f", "x") },
			inputs:  []string{strings.Repeat("d/", 31) + "d"},
			want:    []string{strings.Repeat("d/", 31) + "d"},
			refused: map[string]string{strings.Repeat("d/", 32) + "f": "levels deep"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			w := f.open()
			var (
				s   *Snapshot
				err error
			)
			within(t, func() { s, err = w.Snapshot(tc.inputs, Options{}) })
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("Snapshot(%q) = %v, want %v containing %q", tc.inputs, err, tc.err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(s); !slices.Equal(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Errorf("files = %q, want %q", got, tc.want)
			}
			if len(s.Refused) != len(tc.refused) {
				t.Errorf("refused:\n%s", findings(s.Refused))
			}
			for p, why := range tc.refused {
				if !hasFinding(s.Refused, p, why) {
					t.Errorf("%q not refused with %q:\n%s", p, why, findings(s.Refused))
				}
			}
			for _, in := range s.Files {
				if strings.Contains(string(in.Data), "canary") {
					t.Errorf("%s carries the canary's content", in.Name)
				}
			}
		})
	}
}

func TestSnapshotCaps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		caps    Caps
		inputs  []string
		want    []string
		refused map[string]string
		errText string // an api.ErrLimitExceeded error with these words
	}{
		{name: "files", caps: Caps{Files: 3}, errText: "more than 3 entries to copy in (the workspace files cap)"},
		{name: "files named fewer", caps: Caps{Files: 3}, inputs: []string{"b"}, want: []string{"b", "b/1", "b/2"}},
		{name: "bytes", caps: Caps{Bytes: 21}, errText: "more than 21 bytes to copy in (the workspace bytes cap)"},
		{name: "bytes named fewer", caps: Caps{Bytes: 21}, inputs: []string{"a"}, want: []string{"a"}},
		{
			name: "file bytes", caps: Caps{FileBytes: 9},
			want:    []string{"b", "b/1", "b/2"},
			refused: map[string]string{"a": "is 20 bytes, over the 9-byte cap on one file"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.file("a", strings.Repeat("a", 20))
			f.file("b/1", "1")
			f.file("b/2", "2")
			s, err := f.open().Snapshot(tc.inputs, Options{Caps: tc.caps})
			if tc.errText != "" {
				if !errors.Is(err, api.ErrLimitExceeded) || !strings.Contains(err.Error(), tc.errText) || !strings.Contains(err.Error(), "name fewer inputs") {
					t.Fatalf("Snapshot = %v, want a limit error containing %q", err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(s); !slices.Equal(got, tc.want) {
				t.Errorf("files = %q, want %q", got, tc.want)
			}
			if len(s.Refused) != len(tc.refused) {
				t.Errorf("refused:\n%s", findings(s.Refused))
			}
			for p, why := range tc.refused {
				if !hasFinding(s.Refused, p, why) {
					t.Errorf("%q not refused with %q:\n%s", p, why, findings(s.Refused))
				}
			}
		})
	}
	if (Caps{}).withDefaults() != (Caps{Files: DefaultFiles, Bytes: DefaultBytes, FileBytes: DefaultFileBytes}) {
		t.Errorf("zero Caps do not take the defaults")
	}
}

func TestSnapshotInvalidExclude(t *testing.T) {
	f := newFixture(t)
	if _, err := f.open().Snapshot(nil, Options{Excludes: []string{"../x"}}); !errors.Is(err, api.ErrInvalidParams) {
		t.Fatalf("Snapshot with an invalid exclude = %v", err)
	}
}

func TestSnapshotPermissionDenied(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("root reads what it is denied")
	}
	f := newFixture(t)
	f.file("locked/secret", "s")
	f.fileMode("unreadable", "u", 0)
	f.file("ok", "ok")
	if err := os.Chmod(f.path("locked"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(f.path("locked"), 0o755) })
	s, err := f.open().Snapshot(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); !slices.Equal(got, []string{"locked", "ok"}) {
		t.Errorf("files = %q", got)
	}
	if !hasFinding(s.Refused, "locked", "permission denied") || !hasFinding(s.Refused, "unreadable", "permission denied") {
		t.Errorf("refused:\n%s", findings(s.Refused))
	}
}

// TestSnapshotConcurrent: one Workspace serves runs at once; each walk
// reads the directories from their start.
func TestSnapshotConcurrent(t *testing.T) {
	f := newFixture(t)
	project(f)
	w := f.open()
	want, err := w.Snapshot(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			s, err := w.Snapshot(nil, Options{})
			if err == nil && !slices.Equal(names(s), names(want)) {
				err = errors.New(strings.Join(names(s), ","))
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestSnapshotSpecial: sockets and devices are refused by kind, never
// opened.
func TestSnapshotSpecial(t *testing.T) {
	f := newFixture(t)
	l, err := net.Listen("unix", f.path("sock"))
	if err != nil {
		t.Skipf("no unix socket here: %v", err)
	}
	defer l.Close()
	want := map[string]string{"sock": "is a socket"}
	if err := unix.Mknod(f.path("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err == nil {
		want["null"] = "is a character device"
	} else {
		t.Logf("no device node (%v): sockets only", err)
	}
	var s *Snapshot
	within(t, func() { s, err = f.open().Snapshot(nil, Options{}) })
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Files) != 0 || len(s.Refused) != len(want) {
		t.Errorf("files %q, refused:\n%s", names(s), findings(s.Refused))
	}
	for p, why := range want {
		if !hasFinding(s.Refused, p, why) {
			t.Errorf("%s not refused with %q:\n%s", p, why, findings(s.Refused))
		}
	}
}
