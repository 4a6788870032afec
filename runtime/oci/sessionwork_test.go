package oci

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// sessionBundle is a Bundle with a workdir of its own, owned by the test's
// user: what a session sandbox's bundle is on the host side, without the
// tmpfs (no root needed).
func sessionBundle(t *testing.T) *Bundle {
	t.Helper()
	return &Bundle{ID: "skillbox-stest", Workdir: t.TempDir(), OwnerUID: os.Getuid(), OwnerGID: os.Getgid()}
}

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// noTempLeft checks that no ".skillbox-in-" file of WriteSessionInputs is
// left anywhere in the workdir.
func noTempLeft(t *testing.T, wd string) {
	t.Helper()
	_ = filepath.WalkDir(wd, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".skillbox-in") {
			t.Errorf("temporary input left behind: %s", p)
		}
		return nil
	})
}

// TestWriteSessionInputsReplaces: a path that holds a file or a link from
// an earlier run gets the new entry (a new inode: a reader of the old file
// never sees half of the new one), a directory is kept with what it holds.
func TestWriteSessionInputsReplaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, wd string)
		in    runtime.InputFile
		check func(t *testing.T, wd string)
	}{
		{
			name:  "file over file",
			setup: func(t *testing.T, wd string) { writeTree(t, wd, map[string]string{"a.txt": "old contents"}) },
			in:    runtime.InputFile{Name: "a.txt", Data: []byte("new"), Mode: 0o600},
			check: func(t *testing.T, wd string) {
				if got := readString(t, filepath.Join(wd, "a.txt")); got != "new" {
					t.Errorf("a.txt holds %q", got)
				}
				if st, _ := os.Lstat(filepath.Join(wd, "a.txt")); st == nil || st.Mode() != 0o600 {
					t.Errorf("a.txt mode %v, want 0600", st.Mode())
				}
			},
		},
		{
			name: "file over file in a subdir",
			setup: func(t *testing.T, wd string) {
				writeTree(t, wd, map[string]string{"d/e/a.txt": "old", "d/e/other": "o"})
			},
			in: runtime.InputFile{Name: "d/e/a.txt", Data: []byte("new")},
			check: func(t *testing.T, wd string) {
				if got := readString(t, filepath.Join(wd, "d/e/a.txt")); got != "new" {
					t.Errorf("d/e/a.txt holds %q", got)
				}
				if got := readString(t, filepath.Join(wd, "d/e/other")); got != "o" {
					t.Errorf("d/e/other holds %q", got)
				}
			},
		},
		{
			name: "file over link",
			setup: func(t *testing.T, wd string) {
				writeTree(t, wd, map[string]string{"target": "T"})
				if err := os.Symlink("target", filepath.Join(wd, "l")); err != nil {
					t.Fatal(err)
				}
			},
			in: runtime.InputFile{Name: "l", Data: []byte("file now")},
			check: func(t *testing.T, wd string) {
				st, err := os.Lstat(filepath.Join(wd, "l"))
				if err != nil || !st.Mode().IsRegular() {
					t.Fatalf("l is not a regular file: %v %v", st, err)
				}
				if got := readString(t, filepath.Join(wd, "target")); got != "T" {
					t.Errorf("the link's target was written: %q", got)
				}
			},
		},
		{
			name:  "link over file",
			setup: func(t *testing.T, wd string) { writeTree(t, wd, map[string]string{"f": "F"}) },
			in:    runtime.InputFile{Name: "f", Kind: runtime.InputSymlink, Target: "elsewhere"},
			check: func(t *testing.T, wd string) {
				if tgt, err := os.Readlink(filepath.Join(wd, "f")); err != nil || tgt != "elsewhere" {
					t.Errorf("f: link %q, %v", tgt, err)
				}
			},
		},
		{
			name: "link over link",
			setup: func(t *testing.T, wd string) {
				if err := os.Symlink("one", filepath.Join(wd, "l")); err != nil {
					t.Fatal(err)
				}
			},
			in: runtime.InputFile{Name: "l", Kind: runtime.InputSymlink, Target: "two"},
			check: func(t *testing.T, wd string) {
				if tgt, err := os.Readlink(filepath.Join(wd, "l")); err != nil || tgt != "two" {
					t.Errorf("l: link %q, %v", tgt, err)
				}
			},
		},
		{
			name:  "dir kept",
			setup: func(t *testing.T, wd string) { writeTree(t, wd, map[string]string{"d/keep.txt": "k"}) },
			in:    runtime.InputFile{Name: "d", Kind: runtime.InputDir, Mode: 0o750},
			check: func(t *testing.T, wd string) {
				if got := readString(t, filepath.Join(wd, "d/keep.txt")); got != "k" {
					t.Errorf("d/keep.txt holds %q", got)
				}
				if st, _ := os.Lstat(filepath.Join(wd, "d")); st == nil || st.Mode() != os.ModeDir|0o750 {
					t.Errorf("d mode %v, want dir 0750", st.Mode())
				}
			},
		},
		{
			name:  "new file beside old ones",
			setup: func(t *testing.T, wd string) { writeTree(t, wd, map[string]string{"old": "o"}) },
			in:    runtime.InputFile{Name: "sub/new", Data: []byte("n")},
			check: func(t *testing.T, wd string) {
				if readString(t, filepath.Join(wd, "old")) != "o" || readString(t, filepath.Join(wd, "sub/new")) != "n" {
					t.Error("old or new file wrong")
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := sessionBundle(t)
			tc.setup(t, b.Workdir)
			var held *os.File
			if st, err := os.Lstat(filepath.Join(b.Workdir, tc.in.Name)); err == nil && st.Mode().IsRegular() {
				// A reader of the old file keeps reading the old file.
				if held, err = os.Open(filepath.Join(b.Workdir, tc.in.Name)); err != nil {
					t.Fatal(err)
				}
				defer held.Close()
			}
			var old []byte
			if held != nil {
				old, _ = os.ReadFile(held.Name())
			}
			if err := b.WriteSessionInputs([]runtime.InputFile{tc.in}); err != nil {
				t.Fatal(err)
			}
			tc.check(t, b.Workdir)
			noTempLeft(t, b.Workdir)
			if held != nil {
				buf := make([]byte, len(old)+8)
				n, _ := held.ReadAt(buf, 0)
				if string(buf[:n]) != string(old) {
					t.Errorf("the old file was written in place: an open reader sees %q, not %q", buf[:n], old)
				}
			}
		})
	}
}

// TestWriteSessionInputsFileOverDir: a file input where a directory is
// fails and leaves the directory and no temporary file.
func TestWriteSessionInputsFileOverDir(t *testing.T) {
	b := sessionBundle(t)
	writeTree(t, b.Workdir, map[string]string{"d/keep.txt": "k"})
	if err := b.WriteSessionInputs([]runtime.InputFile{{Name: "d", Data: []byte("x")}}); err == nil {
		t.Error("a file was written over a non-empty directory")
	}
	if got := readString(t, filepath.Join(b.Workdir, "d/keep.txt")); got != "k" {
		t.Errorf("d/keep.txt holds %q", got)
	}
	noTempLeft(t, b.Workdir)
}

// TestWriteSessionInputsStateDir: the session state dir is skillbox's, and
// nothing of a refused list is written.
func TestWriteSessionInputsStateDir(t *testing.T) {
	for _, name := range []string{sessionStateName, sessionStateName + "/runs/r.log", sessionStateName + "/x"} {
		t.Run(name, func(t *testing.T) {
			b := sessionBundle(t)
			err := b.WriteSessionInputs([]runtime.InputFile{{Name: "first.txt", Data: []byte("1")}, {Name: name, Data: []byte("forged")}})
			if !errors.Is(err, runtime.ErrInvalidJob) {
				t.Fatalf("input %q: %v, want ErrInvalidJob", name, err)
			}
			if !strings.Contains(err.Error(), runtime.SessionStateDir) {
				t.Errorf("the refusal does not name %s: %v", runtime.SessionStateDir, err)
			}
			if ents, _ := os.ReadDir(b.Workdir); len(ents) != 0 {
				t.Errorf("a refused list wrote %v", ents)
			}
		})
	}
	// A name that only starts like it is the caller's.
	b := sessionBundle(t)
	if err := b.WriteSessionInputs([]runtime.InputFile{{Name: sessionStateName + "x", Data: []byte("ok")}, {Name: "a/" + sessionStateName, Data: []byte("ok")}}); err != nil {
		t.Errorf("%sx and a/%s refused: %v", sessionStateName, sessionStateName, err)
	}
}

// TestWriteSessionInputsNeverFollowsLinks: a link the sandbox planted in a
// path component (the sandbox lives and writes /work while inputs go in)
// is never followed; nothing is written outside the workdir.
func TestWriteSessionInputsNeverFollowsLinks(t *testing.T) {
	for _, tc := range []struct {
		name string
		link string // relative to the workdir, points at outside
		in   runtime.InputFile
	}{
		{"top component", "evil", runtime.InputFile{Name: "evil/x", Data: []byte("x")}},
		{"deep component", "a/b/evil", runtime.InputFile{Name: "a/b/evil/c/x", Data: []byte("x")}},
		{"dir input", "evil", runtime.InputFile{Name: "evil/d", Kind: runtime.InputDir}},
		{"link input", "evil", runtime.InputFile{Name: "evil/l", Kind: runtime.InputSymlink, Target: "/etc/passwd"}},
		{"dir input on the link", "evil", runtime.InputFile{Name: "evil", Kind: runtime.InputDir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := sessionBundle(t)
			outside := t.TempDir()
			if err := os.MkdirAll(filepath.Join(b.Workdir, filepath.Dir(tc.link)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(b.Workdir, tc.link)); err != nil {
				t.Fatal(err)
			}
			if err := b.WriteSessionInputs([]runtime.InputFile{tc.in}); err == nil {
				t.Errorf("%s written through a link", tc.in.Name)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("wrote outside the workdir: %v", ents)
			}
		})
	}
	// A link at the entry's own path is replaced, its target untouched.
	b := sessionBundle(t)
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(b.Workdir, "f")); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteSessionInputs([]runtime.InputFile{{Name: "f", Data: []byte("mine")}}); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, outside); got != "secret" {
		t.Errorf("the link's target outside was written: %q", got)
	}
	if got := readString(t, filepath.Join(b.Workdir, "f")); got != "mine" {
		t.Errorf("f holds %q", got)
	}
}

// TestCollectChanges: what a run did to a live workdir, against the state
// before it.
func TestCollectChanges(t *testing.T) {
	b := sessionBundle(t)
	wd := b.Workdir
	p := func(rel string) string { return filepath.Join(wd, rel) }
	writeTree(t, wd, map[string]string{
		"unchanged.txt":        "same",
		"changed.txt":          "before",
		"deleted.txt":          "gone",
		"to-dir":               "file",
		"to-link":              "file",
		"sub/keep.txt":         "keep",
		"sub/deleted.txt":      "gone too",
		"gonedir/inside.txt":   "with its dir",
		".skillbox/runs/r.log": "log line\n",
	})
	if err := os.Symlink("unchanged.txt", p("link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("unchanged.txt", p("relinked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", p("gonelink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := b.WorkdirState()
	if err != nil {
		t.Fatal(err)
	}
	for k := range before.m {
		if k == sessionStateName || strings.HasPrefix(k, sessionStateName+"/") {
			t.Errorf("WorkdirState holds %s", k)
		}
	}

	// The run.
	writeTree(t, wd, map[string]string{
		"new.txt":                  "new",
		"changed.txt":              "after, longer",
		"sub/new.txt":              "n",
		".skillbox/runs/r.log":     "log line\nmore\n",
		".skillbox/runs/other.log": "x",
	})
	for _, rm := range []string{"deleted.txt", "sub/deleted.txt", "gonedir", "to-dir", "to-link", "relinked", "gonelink"} {
		if err := os.RemoveAll(p(rm)); err != nil {
			t.Fatal(err)
		}
	}
	writeTree(t, wd, map[string]string{"to-dir/inner.txt": "inner"})
	if err := os.Symlink("/etc/passwd", p("to-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("new.txt", p("relinked")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p("newfifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	o, err := b.CollectChanges(before, runtime.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range o.Files {
		files = append(files, f.Path+"="+string(f.Data))
	}
	if got, want := strings.Join(files, ","), "changed.txt=after, longer,new.txt=new,sub/new.txt=n,to-dir/inner.txt=inner"; got != want {
		t.Errorf("files %q\nwant  %q", got, want)
	}
	if got, want := strings.Join(o.Deleted, ","), "deleted.txt,gonedir/inside.txt,gonelink,sub/deleted.txt"; got != want {
		t.Errorf("deleted %q, want %q", got, want)
	}
	sk := strings.Join(o.Skipped, "\n")
	for _, want := range []string{"to-link: symlink, not followed", "relinked: symlink, not followed", "newfifo: fifo, not collected"} {
		if !strings.Contains(sk, want) {
			t.Errorf("skipped %q lacks %q", o.Skipped, want)
		}
	}
	if len(o.Skipped) != 3 {
		t.Errorf("skipped %q, want the three above only (an unchanged fifo or link is not reported)", o.Skipped)
	}
	for _, s := range append(append(slices.Clone(files), o.Deleted...), o.Skipped...) {
		if strings.Contains(s, sessionStateName) {
			t.Errorf("%s reported: %s", runtime.SessionStateDir, s)
		}
	}
	if o.Truncated {
		t.Errorf("truncated without a cap: %+v", o)
	}

	// Nothing changed since: nothing to report.
	now, err := b.WorkdirState()
	if err != nil {
		t.Fatal(err)
	}
	o, err = b.CollectChanges(now, runtime.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Files)+len(o.Deleted)+len(o.Skipped) != 0 {
		// The links and the fifo the run made are unchanged since.
		t.Errorf("a second collection with no run between reports %+v", o)
	}
}

// TestCollectChangesReplacedFifo: a fifo replaced by a file is a new file;
// one replaced by another fifo is reported as a fifo.
func TestCollectChangesReplacedFifo(t *testing.T) {
	b := sessionBundle(t)
	for _, n := range []string{"f1", "f2"} {
		if err := syscall.Mkfifo(filepath.Join(b.Workdir, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before, err := b.WorkdirState()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"f1", "f2"} {
		if err := os.Remove(filepath.Join(b.Workdir, n)); err != nil {
			t.Fatal(err)
		}
	}
	writeTree(t, b.Workdir, map[string]string{"f1": "now a file"})
	if err := syscall.Mkfifo(filepath.Join(b.Workdir, "f2"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := b.CollectChanges(before, runtime.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Files) != 1 || o.Files[0].Path != "f1" || string(o.Files[0].Data) != "now a file" {
		t.Errorf("files %+v, want f1", o.Files)
	}
	if len(o.Skipped) != 1 || o.Skipped[0] != "f2: fifo, not collected" {
		t.Errorf("skipped %q, want the new fifo f2", o.Skipped)
	}
	if len(o.Deleted) != 0 {
		t.Errorf("deleted %q: fifos are not inputs", o.Deleted)
	}
}

// TestCollectChangesCaps: the output caps apply to what changed, and what
// did not change counts against none of them.
func TestCollectChangesCaps(t *testing.T) {
	b := sessionBundle(t)
	writeTree(t, b.Workdir, map[string]string{"old/1": "1111", "old/2": "2222", "old/3": "3333", "big-old": strings.Repeat("b", 64)})
	before, err := b.WorkdirState()
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, b.Workdir, map[string]string{"new/1": "1111", "new/2": "2222", "new/3": "3333", "new/4": "44444444"})
	for _, tc := range []struct {
		name     string
		lim      runtime.Limits
		files    int
		by       string
		omitted  int
		omittedB int64
	}{
		{"files", runtime.Limits{OutputFiles: 2}, 2, runtime.CapOutputFiles, 2, 12},
		{"total bytes", runtime.Limits{OutputBytes: 10}, 2, runtime.CapOutputBytes, 2, 12},
		{"file bytes", runtime.Limits{OutputFileBytes: 5}, 3, runtime.CapOutputFileBytes, 1, 8},
		{"none", runtime.Limits{}, 4, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := b.CollectChanges(before, tc.lim)
			if err != nil {
				t.Fatal(err)
			}
			if len(o.Files) != tc.files || o.TruncatedBy != tc.by || o.Truncated != (tc.by != "") ||
				o.OmittedFiles != tc.omitted || o.OmittedBytes != tc.omittedB {
				t.Errorf("got %d files, by %q, omitted %d/%d bytes; want %d, %q, %d/%d",
					len(o.Files), o.TruncatedBy, o.OmittedFiles, o.OmittedBytes, tc.files, tc.by, tc.omitted, tc.omittedB)
			}
			for _, f := range o.Files {
				if !strings.HasPrefix(f.Path, "new/") {
					t.Errorf("unchanged %s collected", f.Path)
				}
			}
		})
	}
}

// TestWorkdirStateMissing: a workdir that is gone, or a link, is an error,
// not an empty state.
func TestWorkdirStateMissing(t *testing.T) {
	b := sessionBundle(t)
	real := b.Workdir
	b.Workdir = filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, b.Workdir); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WorkdirState(); err == nil {
		t.Error("WorkdirState followed a link as the workdir")
	}
	if _, err := b.CollectChanges(&WorkdirState{m: inputManifest{}}, runtime.Limits{}); err == nil {
		t.Error("CollectChanges followed a link as the workdir")
	}
	if err := b.WriteSessionInputs([]runtime.InputFile{{Name: "x", Data: []byte("x")}}); err == nil {
		t.Error("WriteSessionInputs followed a link as the workdir")
	}
	if ents, _ := os.ReadDir(real); len(ents) != 0 {
		t.Errorf("written through the link: %v", ents)
	}
}

// TestWriteSessionInputsTempNameCollision: WriteSessionInputs writes an
// entry beside its path under a temporary name it makes itself; a file
// named like one (an input of the same list, or a file an earlier run
// left) survives, and a directory of such a name (a sandbox can make one)
// does not stop the input.
func TestWriteSessionInputsTempNameCollision(t *testing.T) {
	t.Run("input of the same list", func(t *testing.T) {
		b := sessionBundle(t)
		err := b.WriteSessionInputs([]runtime.InputFile{{Name: ".skillbox-in-a", Data: []byte("first")}, {Name: "a", Data: []byte("second")}})
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]string{".skillbox-in-a": "first", "a": "second"} {
			if got, err := os.ReadFile(filepath.Join(b.Workdir, name)); err != nil || string(got) != want {
				t.Errorf("%s: %q, %v; want %q", name, got, err, want)
			}
		}
	})
	t.Run("file of an earlier run", func(t *testing.T) {
		b := sessionBundle(t)
		writeTree(t, b.Workdir, map[string]string{"d/.skillbox-in-a": "the run's own"})
		if err := b.WriteSessionInputs([]runtime.InputFile{{Name: "d/a", Data: []byte("input")}}); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(b.Workdir, "d/.skillbox-in-a")); err != nil || string(got) != "the run's own" {
			t.Errorf("d/.skillbox-in-a: %q, %v; an earlier run's file was removed", got, err)
		}
	})
	t.Run("dir of an earlier run", func(t *testing.T) {
		b := sessionBundle(t)
		writeTree(t, b.Workdir, map[string]string{".skillbox-in-a/x": "x"})
		if err := b.WriteSessionInputs([]runtime.InputFile{{Name: "a", Data: []byte("input")}}); err != nil {
			t.Errorf("a directory named like the temporary file stops the input: %v", err)
		}
	})
}
