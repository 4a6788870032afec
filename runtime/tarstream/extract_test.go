package tarstream

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// extractInto extracts stream into a fresh dir under a parent of its own.
func extractInto(t *testing.T, stream []byte, opts ExtractOptions) (string, string, error) {
	t.Helper()
	parent := t.TempDir()
	dir := filepath.Join(parent, "x")
	must(t, os.Mkdir(dir, 0o700))
	root, err := os.OpenRoot(dir)
	must(t, err)
	defer root.Close()
	_, err = Extract(bytes.NewReader(stream), root, opts)
	return parent, dir, err
}

func TestExtractRefuses(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		want    string
	}{
		{"dotdot", []tar.Header{{Name: "../x", Typeflag: tar.TypeReg}}, `"..`},
		{"dotdot inside", []tar.Header{{Name: "./a/../../x", Typeflag: tar.TypeReg}}, `".."`},
		{"absolute", []tar.Header{{Name: "/etc/x", Typeflag: tar.TypeReg}}, "absolute"},
		{"beneath a symlink", []tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "l/x", Typeflag: tar.TypeReg}}, "beneath l, a symlink"},
		{"beneath a relative symlink", []tar.Header{{Name: "d/", Typeflag: tar.TypeDir}, {Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, {Name: "l/x", Typeflag: tar.TypeReg}}, "a symlink"},
		{"beneath a file", []tar.Header{{Name: "f", Typeflag: tar.TypeReg}, {Name: "f/x", Typeflag: tar.TypeReg}}, "a file of the stream"},
		{"hard link out", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}}, `".."`},
		{"hard link absolute", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}, "absolute"},
		{"hard link to nothing", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "nope"}}, "not a regular file earlier"},
		{"hard link to a symlink", []tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, {Name: "h", Typeflag: tar.TypeLink, Linkname: "l"}}, "not a regular file earlier"},
		{"device", []tar.Header{{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}, "device"},
		{"block device", []tar.Header{{Name: "sda", Typeflag: tar.TypeBlock}}, "device"},
		{"fifo", []tar.Header{{Name: "p", Typeflag: tar.TypeFifo}}, "fifo"},
		{"twice", []tar.Header{{Name: "f", Typeflag: tar.TypeReg}, {Name: "f", Typeflag: tar.TypeReg}}, "twice"},
		{"unclean", []tar.Header{{Name: "a//b", Typeflag: tar.TypeReg}}, "not a clean name"},
		{"root not a dir", []tar.Header{{Name: ".", Typeflag: tar.TypeSymlink, Linkname: "/"}}, "root entry"},
		{"negative owner", []tar.Header{{Name: "f", Typeflag: tar.TypeReg, Uid: -1}}, "owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, _, err := extractInto(t, buildTar(t, tc.entries, nil), ExtractOptions{})
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("extract: %v, want an ErrUnsafe error with %q", err, tc.want)
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 1 {
				t.Errorf("extracting wrote beside its dir: %v", ents)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("extracting wrote through a link: %v", ents)
			}
		})
	}
	t.Run("sparse", func(t *testing.T) {
		_, _, err := extractInto(t, sparseTar(t, "./big", sparseRealsize), ExtractOptions{})
		if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "sparse") {
			t.Errorf("extract: %v, want the sparse entry refused", err)
		}
	})
	t.Run("entries", func(t *testing.T) {
		_, _, err := extractInto(t, buildTar(t, []tar.Header{{Name: "a", Typeflag: tar.TypeReg}, {Name: "b", Typeflag: tar.TypeReg}}, nil), ExtractOptions{MaxEntries: 1})
		if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "more than 1 entries") {
			t.Errorf("extract: %v, want too many entries", err)
		}
	})
}

func TestExtractModes(t *testing.T) {
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = runtime.ContainerUID, runtime.ContainerGID
	}
	stream := buildTar(t, []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o777},
		{Name: "./ro/", Typeflag: tar.TypeDir, Mode: 0o500, Uid: uid, Gid: gid},
		{Name: "./ro/f", Typeflag: tar.TypeReg, Mode: 0o6755, Uid: uid, Gid: gid},
		{Name: "./implicit/g", Typeflag: tar.TypeReg, Mode: 0o640, Uid: uid, Gid: gid},
		{Name: "./h", Typeflag: tar.TypeLink, Linkname: "ro/f", Uid: uid, Gid: gid},
		{Name: "./l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd", Uid: uid, Gid: gid},
	}, map[string]string{"./ro/f": "#!/bin/sh\n", "./implicit/g": "g"})
	for _, tc := range []struct {
		name  string
		opts  ExtractOptions
		modes map[string]os.FileMode
		owner int
	}{
		{"as the stream says", ExtractOptions{}, map[string]os.FileMode{
			"ro": os.ModeDir | 0o500, "ro/f": 0o755, "implicit": os.ModeDir | 0o755, "implicit/g": 0o640, "h": 0o755, "l": os.ModeSymlink | 0o777,
		}, uid},
		{"read-only", ExtractOptions{ReadOnly: true}, map[string]os.FileMode{
			"ro": os.ModeDir | 0o555, "ro/f": 0o555, "implicit": os.ModeDir | 0o555, "implicit/g": 0o444, "h": 0o555, "l": os.ModeSymlink | 0o777,
		}, os.Geteuid()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, dir, err := extractInto(t, stream, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { makeWritable(dir) })
			for name, want := range tc.modes {
				fi, err := os.Lstat(filepath.Join(dir, name))
				if err != nil {
					t.Error(err)
					continue
				}
				if fi.Mode() != want {
					t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
				}
				if st := fi.Sys().(*syscallStat); int(st.Uid) != tc.owner {
					t.Errorf("%s: owner %d, want %d", name, st.Uid, tc.owner)
				}
			}
			if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
				t.Errorf("the dir itself got mode %v from the stream, want it kept", fi.Mode())
			}
		})
	}
}

// makeWritable lets a test's temp dir be removed after a read-only
// extract (when the test is not root).
func makeWritable(dir string) {
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
}

func TestWriteDirRoundTrip(t *testing.T) {
	src := t.TempDir()
	files := []runtime.InputFile{
		{Name: "a.txt", Data: []byte("a")},
		{Name: "deep/er/b.sh", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Name: "deep/link", Kind: runtime.InputSymlink, Target: "../a.txt"},
		{Name: "big", Data: bytes.Repeat([]byte("b"), 100<<10)},
	}
	var in bytes.Buffer
	must(t, WriteInputTar(&in, files, time.Now()))
	root, err := os.OpenRoot(src)
	must(t, err)
	defer root.Close()
	if _, err := Extract(bytes.NewReader(in.Bytes()), root, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		max       int64
		truncated bool
		want      []string
	}{
		{"whole", 1 << 20, false, []string{"a.txt", "big", "deep/er/b.sh", "deep/link", "outputs"}},
		{"cut before big", 8 << 10, true, []string{"a.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := os.Open(src)
			must(t, err)
			defer d.Close()
			var out bytes.Buffer
			w, err := WriteDir(&out, d, tc.max)
			if err != nil {
				t.Fatal(err)
			}
			if w.Bytes != int64(out.Len()) || w.Bytes > tc.max || w.Truncated != tc.truncated {
				t.Fatalf("wrote %+v (%d bytes), bound %d, want truncated %v", w, out.Len(), tc.max, tc.truncated)
			}
			if tc.truncated && w.Omitted != "./big" {
				t.Errorf("omitted %q, want ./big", w.Omitted)
			}
			into := t.TempDir()
			skipped, err := Unpack(Bounded(&out, tc.max), into)
			if err != nil || len(skipped) != 0 {
				t.Fatalf("unpack: %v %q", err, skipped)
			}
			var got []string
			_ = filepath.Walk(into, func(p string, fi os.FileInfo, err error) error {
				if rel, _ := filepath.Rel(into, p); err == nil && (!fi.IsDir() || rel == "outputs") {
					got = append(got, rel)
				}
				return nil
			})
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("unpacked %q, want %q", got, tc.want)
			}
		})
	}
}

func FuzzExtract(f *testing.F) {
	f.Add([]byte{})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "./l", Typeflag: tar.TypeSymlink, Linkname: ".."})
	_ = tw.WriteHeader(&tar.Header{Name: "./l/y", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	_, _ = tw.Write([]byte("y"))
	_ = tw.WriteHeader(&tar.Header{Name: "./h", Typeflag: tar.TypeLink, Linkname: "../x"})
	_ = tw.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, stream []byte) {
		parent, dir, _ := extractInto(t, stream, ExtractOptions{MaxEntries: 64})
		makeWritable(dir)
		if ents, _ := os.ReadDir(parent); len(ents) != 1 {
			t.Fatalf("extracting wrote beside its dir: %v", ents)
		}
	})
}

type syscallStat = syscall.Stat_t
