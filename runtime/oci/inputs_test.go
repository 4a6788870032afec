package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"golang.org/x/sys/unix"
)

func TestInputWriterTree(t *testing.T) {
	wd := t.TempDir()
	writeTestInputs(t, wd, []runtime.InputFile{
		{Name: "unpacked/ppt/slides/slide1.xml", Data: []byte("<s/>")},
		{Name: "unpacked/[Content_Types].xml", Data: []byte("<t/>"), Mode: 0o600},
		{Name: "unpacked/ppt", Kind: runtime.InputDir, Mode: 0o750},
		{Name: "empty/dir", Kind: runtime.InputDir},
		{Name: "unpacked/link", Kind: runtime.InputSymlink, Target: "/etc/shadow"},
		{Name: "run.sh", Data: []byte("#!/bin/sh"), Mode: 0o755},
	})
	for rel, want := range map[string]os.FileMode{
		"unpacked":                       os.ModeDir | 0o755,
		"unpacked/ppt":                   os.ModeDir | 0o750,
		"unpacked/ppt/slides":            os.ModeDir | 0o755,
		"unpacked/ppt/slides/slide1.xml": 0o644,
		"unpacked/[Content_Types].xml":   0o600,
		"empty/dir":                      os.ModeDir | 0o755,
		"unpacked/link":                  os.ModeSymlink | 0o777,
		"run.sh":                         0o755,
	} {
		st, err := os.Lstat(filepath.Join(wd, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", rel, st.Mode(), want)
		}
	}
	if tgt, _ := os.Readlink(filepath.Join(wd, "unpacked/link")); tgt != "/etc/shadow" {
		t.Errorf("link target %q", tgt)
	}
}

// Validation keeps entries off links; the writer does not rely on it: a
// link already in the workdir (say, from an earlier entry) is never
// followed on the way to a later one.
func TestInputWriterNeverFollowsLinks(t *testing.T) {
	wd, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(wd, "l")); err != nil {
		t.Fatal(err)
	}
	w := newTestWriter(t, wd)
	for _, f := range []runtime.InputFile{{Name: "l/evil", Data: []byte("x")}, {Name: "l/sub/evil", Data: []byte("x")}, {Name: "l", Kind: runtime.InputDir}, {Name: "l/d", Kind: runtime.InputDir}} {
		if err := w.write(&f); err == nil {
			t.Errorf("%s: written through a symlink", f.Name)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("wrote outside the workdir: %v", ents)
	}
}

func TestOutputsAreWhatChanged(t *testing.T) {
	wd := t.TempDir()
	man := writeTestInputs(t, wd, []runtime.InputFile{
		{Name: "same.txt", Data: []byte("same")},
		{Name: "touched.txt", Data: []byte("touched")},
		{Name: "rewritten.txt", Data: []byte("rewritten")},
		{Name: "edited.txt", Data: []byte("before")},
		{Name: "grown.txt", Data: []byte("short")},
		{Name: "replaced.txt", Data: []byte("replaced")},
		{Name: "d/deep.xml", Data: []byte("<a/>")},
		{Name: "link", Kind: runtime.InputSymlink, Target: "same.txt"},
		{Name: "relinked", Kind: runtime.InputSymlink, Target: "same.txt"},
		{Name: "gone.txt", Data: []byte("gone")},
		{Name: "outputs", Kind: runtime.InputDir},
	})
	p := func(rel string) string { return filepath.Join(wd, rel) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chtimes(p("touched.txt"), time.Unix(1, 0), time.Unix(1, 0)))
	must(os.WriteFile(p("rewritten.txt"), []byte("rewritten"), 0o644)) // same bytes
	must(os.WriteFile(p("edited.txt"), []byte("after!"), 0o644))       // same size, other bytes
	must(os.WriteFile(p("grown.txt"), []byte("longer now"), 0o644))
	must(os.Remove(p("replaced.txt")))
	must(os.WriteFile(p("replaced.txt"), []byte("REPLACED"), 0o644)) // new inode, same size
	must(os.Remove(p("relinked")))
	must(os.Symlink("/etc/passwd", p("relinked")))
	must(os.Remove(p("gone.txt")))
	must(os.WriteFile(p("outputs/new.txt"), []byte("new"), 0o644))
	must(os.WriteFile(p("d/new.xml"), []byte("<n/>"), 0o644))

	o, err := collectOutputs(wd, runtime.Limits{}, man)
	must(err)
	var got []string
	for _, f := range o.Files {
		got = append(got, f.Path+"="+string(f.Data))
	}
	want := "d/new.xml=<n/>,edited.txt=after!,grown.txt=longer now,outputs/new.txt=new,replaced.txt=REPLACED"
	if strings.Join(got, ",") != want {
		t.Errorf("outputs\n got %s\nwant %s", strings.Join(got, ","), want)
	}
	if len(o.Skipped) != 1 || !strings.HasPrefix(o.Skipped[0], "relinked: symlink") {
		t.Errorf("skipped %q, want only the changed link", o.Skipped)
	}
}

// newTestWriter is an inputWriter on dir that makes entries owned by the
// test's own user (no root needed), closed when the test ends.
func newTestWriter(t *testing.T, dir string) *inputWriter {
	t.Helper()
	wd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := &inputWriter{wd: wd, uid: os.Getuid(), gid: os.Getgid(), lastFD: -1, manifest: inputManifest{}}
	t.Cleanup(func() { w.close(); unix.Close(wd) })
	return w
}

// writeTestInputs writes files into dir as writeInputs does, owned by the
// test's own user (no root needed), and returns the manifest.
func writeTestInputs(t *testing.T, dir string, files []runtime.InputFile) inputManifest {
	t.Helper()
	if err := runtime.ValidateInputs(files, 1<<30); err != nil {
		t.Fatal(err)
	}
	w := newTestWriter(t, dir)
	for i := range files {
		if err := w.write(&files[i]); err != nil {
			t.Fatal(err)
		}
	}
	return w.manifest
}

// TestCollectOutputsDeleted: inputs the script removed are reported, each
// by its own lookup, and an input replaced by something else is not.
func TestCollectOutputsDeleted(t *testing.T) {
	wd := t.TempDir()
	inputs := writeTestInputs(t, wd, []runtime.InputFile{
		{Name: "keep.txt", Data: []byte("k")},
		{Name: "gone.txt", Data: []byte("g")},
		{Name: "dir", Kind: runtime.InputDir},
		{Name: "dir/gone-with-dir.txt", Data: []byte("d")},
		{Name: "link", Kind: runtime.InputSymlink, Target: "keep.txt"},
		{Name: "now-a-dir", Data: []byte("x")},
		{Name: "under", Kind: runtime.InputDir},
		{Name: "under/file", Data: []byte("u")},
	})
	for _, rm := range []string{"gone.txt", "dir", "link", "now-a-dir", "under"} {
		if err := os.RemoveAll(filepath.Join(wd, rm)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(wd, "now-a-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	// "under" is now a symlink to a directory that has "file": the link
	// is not followed, and the input under it counts as replaced (the
	// link is reported among the skipped entries), not as deleted.
	other := t.TempDir()
	writeTree(t, other, map[string]string{"file": "u"})
	if err := os.Symlink(other, filepath.Join(wd, "under")); err != nil {
		t.Fatal(err)
	}
	o, err := collectOutputs(wd, runtime.Limits{}, inputs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(o.Deleted, ","), "dir/gone-with-dir.txt,gone.txt,link"; got != want {
		t.Errorf("deleted %q, want %q", got, want)
	}
	var r runtime.Result
	o.Apply(&r)
	if strings.Join(r.Deleted, ",") != strings.Join(o.Deleted, ",") {
		t.Errorf("Apply lost Deleted: %q", r.Deleted)
	}
}
