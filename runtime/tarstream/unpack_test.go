package tarstream

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
)

// buildTar makes a tar stream of entries as `tar -c -C /work .` would,
// with whatever names and types a hostile pod could send.
func buildTar(t *testing.T, entries []tar.Header, data map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h.Size = int64(len(data[h.Name]))
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data[h.Name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUnpackAndCollect(t *testing.T) {
	outside := t.TempDir()
	stream := buildTar(t, []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir},
		{Name: "./outputs/", Typeflag: tar.TypeDir},
		{Name: "./outputs/a.txt", Typeflag: tar.TypeReg, Mode: 0o000},
		{Name: "./b.bin", Typeflag: tar.TypeReg},
		{Name: "./same.txt", Typeflag: tar.TypeReg},
		{Name: "./changed.txt", Typeflag: tar.TypeReg},
		{Name: "./inlink", Typeflag: tar.TypeSymlink, Linkname: "same.txt"},
		{Name: "./escape", Typeflag: tar.TypeSymlink, Linkname: outside},
		{Name: "./escape/x", Typeflag: tar.TypeReg},
		{Name: "../up", Typeflag: tar.TypeReg},
		{Name: "./sub/../../up2", Typeflag: tar.TypeReg},
		{Name: "/abs", Typeflag: tar.TypeReg},
		{Name: "./hard", Typeflag: tar.TypeLink, Linkname: "./b.bin"},
		{Name: "./hardout", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"},
		{Name: "./dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3},
		{Name: "./fifo", Typeflag: tar.TypeFifo},
	}, map[string]string{
		"./outputs/a.txt": "A", "./b.bin": "\x00\x01", "./same.txt": "same", "./changed.txt": "new",
		"./escape/x": "x", "../up": "u", "./sub/../../up2": "u", "/abs": "abs",
	})
	dir := t.TempDir()
	skipped, err := Unpack(bytes.NewReader(stream), dir)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("unpacking wrote outside its dir: %v", ents)
	}
	for _, want := range []string{"escape/x: cannot create", "../up: name outside", "./sub/../../up2: name outside", "hardout: hard link", "dev: character device", "fifo: fifo"} {
		if !slices.ContainsFunc(skipped, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("skipped %q: want one starting %q", skipped, want)
		}
	}
	inputs := []runtime.InputFile{
		{Name: "same.txt", Data: []byte("same")},
		{Name: "changed.txt", Data: []byte("old")},
		{Name: "gone.txt", Data: []byte("gone")},
		{Name: "inlink", Kind: runtime.InputSymlink, Target: "same.txt"},
	}
	outs, err := oci.CollectCopy(dir, runtime.Limits{}, inputs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range outs.Files {
		got = append(got, f.Path+"="+string(f.Data))
	}
	want := []string{"abs=abs", "b.bin=\x00\x01", "changed.txt=new", "hard=\x00\x01", "outputs/a.txt=A"}
	if !slices.Equal(got, want) {
		t.Errorf("outputs %q, want %q", got, want)
	}
	if !slices.Equal(outs.Deleted, []string{"gone.txt"}) {
		t.Errorf("deleted %q, want gone.txt", outs.Deleted)
	}
	if !slices.ContainsFunc(outs.Skipped, func(s string) bool { return s == "escape: symlink, not followed" }) {
		t.Errorf("skipped %q: want the link the job made named", outs.Skipped)
	}
	if slices.ContainsFunc(outs.Skipped, func(s string) bool { return strings.HasPrefix(s, "inlink") }) {
		t.Errorf("skipped %q: an input link left as it was is not named", outs.Skipped)
	}
}

func TestUnpackBounded(t *testing.T) {
	stream := buildTar(t, []tar.Header{
		{Name: "./a", Typeflag: tar.TypeReg},
		{Name: "./big", Typeflag: tar.TypeReg},
	}, map[string]string{"./a": "a", "./big": strings.Repeat("b", 64<<10)})
	for _, tc := range []struct {
		name  string
		bound int64
		over  bool
		files []string
	}{
		{"fits", int64(len(stream)), false, []string{"a", "big"}},
		{"cut in big", 8 << 10, true, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Unpack(Bounded(bytes.NewReader(stream), tc.bound), dir)
			if got := errors.Is(err, ErrOver); got != tc.over || (!tc.over && err != nil) {
				t.Fatalf("unpack: %v, want over the bound %v", err, tc.over)
			}
			var files []string
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				files = append(files, e.Name())
			}
			if !slices.Equal(files, tc.files) {
				t.Errorf("unpacked %q, want %q (a file cut short is removed)", files, tc.files)
			}
		})
	}
}

func TestLimitNotes(t *testing.T) {
	notes := make([]string, MaxNotes+5)
	got := LimitNotes(notes)
	if len(got) != MaxNotes+1 || !strings.Contains(got[MaxNotes], "5 more") {
		t.Errorf("LimitNotes of %d: %d notes, last %q", len(notes), len(got), got[len(got)-1])
	}
}

func FuzzUnpack(f *testing.F) {
	f.Add([]byte{})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "./x/../../y", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	_, _ = tw.Write([]byte("y"))
	_ = tw.WriteHeader(&tar.Header{Name: "./l", Typeflag: tar.TypeSymlink, Linkname: "/"})
	_ = tw.WriteHeader(&tar.Header{Name: "./l/etc", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, stream []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "out")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		_, _ = Unpack(Bounded(bytes.NewReader(stream), 1<<20), dir)
		if ents, _ := os.ReadDir(parent); len(ents) != 1 {
			t.Fatalf("unpacking wrote beside its dir: %v", ents)
		}
	})
}
