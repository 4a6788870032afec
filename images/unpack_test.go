package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestUnpackConfinement feeds hostile layers to the unpacker. Each must be
// refused, and nothing may appear outside the target directory.
func TestUnpackConfinement(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
	}{
		{"dot-dot", []entry{{name: "../evil", body: "x"}}},
		{"dot-dot inside", []entry{{name: "a/../../evil", body: "x"}}},
		{"absolute", []entry{{name: "/evil", body: "x"}}},
		{"absolute dir", []entry{{name: "/tmp/", typ: tar.TypeDir}}},
		{"hardlink out with dot-dot", []entry{{name: "h", typ: tar.TypeLink, link: "../outside/secret"}}},
		{"hardlink absolute", []entry{{name: "h", typ: tar.TypeLink, link: "/etc/hostname"}}},
		{"hardlink to missing", []entry{{name: "h", typ: tar.TypeLink, link: "nothere"}}},
		{"file through absolute symlink", []entry{
			{name: "link", typ: tar.TypeSymlink, link: "/"},
			{name: "link/evil", body: "x"},
		}},
		{"file through relative escaping symlink", []entry{
			{name: "link", typ: tar.TypeSymlink, link: "../outside"},
			{name: "link/evil", body: "x"},
		}},
		{"file through inside symlink", []entry{
			{name: "sub/", typ: tar.TypeDir},
			{name: "link", typ: tar.TypeSymlink, link: "sub"},
			{name: "link/evil", body: "x"},
		}},
		{"dir replaced by symlink", []entry{
			{name: "d/", typ: tar.TypeDir},
			{name: "d", typ: tar.TypeSymlink, link: "../outside"},
			{name: "d/evil", body: "x"},
		}},
		{"hardlink through symlink", []entry{
			{name: "link", typ: tar.TypeSymlink, link: "../outside"},
			{name: "h", typ: tar.TypeLink, link: "link/secret"},
		}},
		{"whiteout through symlink", []entry{
			{name: "link", typ: tar.TypeSymlink, link: "../outside"},
			{name: "link/.wh.secret", body: ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, target, outside := confinementDirs(t)
			err := UnpackTar(context.Background(), bytes.NewReader(makeTar(t, tt.entries)), target, nil)
			if err == nil {
				t.Fatal("hostile layer unpacked without error")
			}
			if !errors.Is(err, ErrUnsafeLayer) {
				t.Logf("refused (by os.Root or the kernel rather than the unpacker's own check): %v", err)
			}
			checkConfined(t, base, target, outside)
		})
	}
}

// confinementDirs makes base with an empty root (the unpack target) and
// outside holding a secret beside it.
func confinementDirs(t testing.TB) (base, target, outside string) {
	t.Helper()
	base = t.TempDir()
	target = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{target, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	return base, target, outside
}

// checkConfined fails t if an unpack into target touched anything outside
// it: base holds root and outside only, outside holds only the secret,
// untouched, and the secret is not linked into the tree.
func checkConfined(t testing.TB, base, target, outside string) {
	t.Helper()
	ents, _ := os.ReadDir(base)
	if len(ents) != 2 {
		t.Errorf("base dir now holds %v", ents)
	}
	ents, _ = os.ReadDir(outside)
	if len(ents) != 1 || ents[0].Name() != "secret" {
		t.Errorf("outside dir now holds %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "s" {
		t.Error("secret changed")
	}
	if _, err := os.Lstat("/evil"); err == nil {
		t.Error("/evil exists")
	}
	filepath.Walk(target, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && info.Name() == "secret" {
			t.Errorf("secret linked into the tree at %s", p)
		}
		return nil
	})
}

// FuzzUnpackTar unpacks arbitrary tar streams: whatever the stream holds,
// the unpack stays inside its directory.
func FuzzUnpackTar(f *testing.F) {
	for _, entries := range [][]entry{
		{{name: "../evil", body: "x"}},
		{{name: "/evil", body: "x"}},
		{{name: "h", typ: tar.TypeLink, link: "../outside/secret"}},
		{{name: "link", typ: tar.TypeSymlink, link: "../outside"}, {name: "link/evil", body: "x"}},
		{{name: "d/", typ: tar.TypeDir}, {name: "d", typ: tar.TypeSymlink, link: "../outside"}, {name: "d/evil", body: "x"}},
		{{name: "link", typ: tar.TypeSymlink, link: "../outside"}, {name: "link/.wh.secret"}},
		{{name: "opq/", typ: tar.TypeDir}, {name: "opq/old", body: "o"}, {name: "opq/.wh..wh..opq"}, {name: "opq/new", body: "n"}},
		{{name: "a/b/c", body: "x"}, {name: "a/l", typ: tar.TypeLink, link: "a/b/c"}, {name: ".wh.a"}},
	} {
		f.Add(makeTar(f, entries))
	}
	for _, name := range sparseFixtures {
		f.Add(readFixture(f, name))
	}
	f.Add(declaredSizeTar(f, "huge", 1<<40))
	f.Fuzz(func(t *testing.T, layer []byte) {
		base, target, outside := confinementDirs(t)
		_ = UnpackTar(context.Background(), bytes.NewReader(layer), target, nil)
		checkConfined(t, base, target, outside)
		removeTree(target) // read-only dirs, when not root
	})
}

// sparseFixtures are tars made by GNU tar 1.34 (tar -b1 --sparse, with
// --format=gnu or --format=posix --sparse-version=V) of etc/hostname and
// huge, a 1 TiB sparse file of 5 bytes of data at its end.
var sparseFixtures = []string{"sparse-gnu.tar", "sparse-pax-0.0.tar", "sparse-pax-0.1.tar", "sparse-pax-1.0.tar"}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// declaredSizeTar is the header of a regular file of size bytes and
// nothing after it: a layer claiming more than it holds.
func declaredSizeTar(t testing.TB, name string, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: testEpoch}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes() // tw is not closed: the body is missing
}

// TestUnpackRefusesSparse: a sparse entry, in any of the GNU formats, is
// refused before anything is written for it, however large it claims to be.
func TestUnpackRefusesSparse(t *testing.T) {
	for _, name := range sparseFixtures {
		t.Run(name, func(t *testing.T) {
			base, target, outside := confinementDirs(t)
			err := UnpackTar(context.Background(), bytes.NewReader(readFixture(t, name)), target, nil)
			if !errors.Is(err, ErrUnsafeLayer) {
				t.Fatalf("sparse layer: err = %v, want ErrUnsafeLayer", err)
			}
			for _, want := range []string{`"huge"`, "sparse", "1.0 TiB"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %s", err, want)
				}
			}
			if _, err := os.Lstat(filepath.Join(target, "huge")); err == nil {
				t.Error("huge was written")
			}
			checkConfined(t, base, target, outside)
		})
	}
}

// unpackLimited unpacks layers into dir as RootFS does, with max as the
// bound on each layer's files.
func unpackLimited(t *testing.T, dir string, max int64, layers ...[]byte) error {
	t.Helper()
	u, err := newUnpacker(dir, os.Geteuid() == 0, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	u.maxLayerBytes = max
	for _, l := range layers {
		if err := u.apply(context.Background(), bytes.NewReader(l)); err != nil {
			return err
		}
	}
	return u.finish()
}

// TestUnpackLayerBound: the file sizes of one layer, summed, may not pass
// the bound; an entry that would is refused before it is written.
func TestUnpackLayerBound(t *testing.T) {
	body := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name    string
		max     int64
		layers  [][]byte
		refused string // the entry named in the error, "" for none
		absent  []string
	}{
		{name: "declared 1 TiB, default bound", max: MaxLayerUnpackedBytes,
			layers: [][]byte{declaredSizeTar(t, "huge", 1<<40)}, refused: "huge", absent: []string{"huge"}},
		{name: "sum over the bound", max: 1000,
			layers:  [][]byte{makeTar(t, []entry{{name: "a", body: body(600)}, {name: "d/", typ: tar.TypeDir}, {name: "d/b", body: body(600)}})},
			refused: "d/b", absent: []string{"d/b"}},
		{name: "sum at the bound", max: 1000,
			layers: [][]byte{makeTar(t, []entry{{name: "a", body: body(500)}, {name: "b", body: body(500)}})}},
		{name: "hard links count once", max: 1000,
			layers: [][]byte{makeTar(t, []entry{{name: "a", body: body(600)}, {name: "l", typ: tar.TypeLink, link: "a"}})}},
		{name: "the bound is per layer", max: 1000,
			layers: [][]byte{makeTar(t, []entry{{name: "a", body: body(600)}}), makeTar(t, []entry{{name: "b", body: body(600)}})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			err := unpackLimited(t, dir, tt.max, tt.layers...)
			if tt.refused == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrLayerTooLarge) {
				t.Fatalf("err = %v, want ErrLayerTooLarge", err)
			}
			for _, want := range []string{"layer entry " + tt.refused + ",", HumanSize(tt.max), "MaxLayerUnpackedBytes"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			for _, p := range tt.absent {
				if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
					t.Errorf("%s was written", p)
				}
			}
		})
	}
}

func TestUnpackReplacesAndWhiteouts(t *testing.T) {
	dir := t.TempDir()
	layer := makeTar(t, []entry{
		{name: "etc/", typ: tar.TypeDir},
		{name: "etc/a", body: "first"},
		{name: "etc/a", body: "second"},                  // later entry wins
		{name: "etc/b", typ: tar.TypeSymlink, link: "a"}, // symlink, then
		{name: "etc/b", body: "file now"},                // replaced by a file, not written through
		{name: "ro/", typ: tar.TypeDir, mode: 0o555},     // read-only dir
		{name: "ro/inside", body: "still written"},       // ...still gets its entry
		{name: "gone/", typ: tar.TypeDir},                //
		{name: "gone/x", body: "x"},                      //
		{name: ".wh.gone", body: ""},                     // whiteout removes gone/
		{name: "opq/", typ: tar.TypeDir},                 //
		{name: "opq/old", body: "old"},                   //
		{name: "opq/.wh..wh..opq", body: ""},             // opaque: clears opq/
		{name: "opq/new", body: "new"},                   //
		{name: "deep/er/file", body: "parents made"},     // no dir entries for parents
		{name: "deep/er/link", typ: tar.TypeLink, link: "deep/er/file"},
	})
	if err := UnpackTar(context.Background(), bytes.NewReader(layer), dir, nil); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	for p, want := range map[string]string{
		"etc/a": "second", "etc/b": "file now", "ro/inside": "still written",
		"opq/new": "new", "deep/er/file": "parents made", "deep/er/link": "parents made",
	} {
		if got := read(p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"gone", "opq/old", ".wh.gone", "opq/.wh..wh..opq"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s should not exist", p)
		}
	}
	if st, _ := os.Stat(filepath.Join(dir, "ro")); st.Mode().Perm() != 0o555 {
		t.Errorf("ro mode %v", st.Mode())
	}
	os.Chmod(filepath.Join(dir, "ro"), 0o755) // let t.TempDir clean up as non-root
}

func TestLayerNameRules(t *testing.T) {
	for in, want := range map[string]string{
		"./": "", ".": "", "./usr/bin/": "usr/bin", "usr//bin/./x": "usr/bin/x", "etc": "etc",
	} {
		got, err := layerName(in)
		if err != nil || got != want {
			t.Errorf("layerName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/etc", "../x", "a/../../x", "a/.."} {
		if _, err := layerName(in); !errors.Is(err, ErrUnsafeLayer) {
			t.Errorf("layerName(%q) accepted", in)
		}
	}
}
