package images

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// entry is one member of a synthetic tar.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
	mtime            time.Time
	uname            string
	pax              map[string]string
}

var testEpoch = time.Date(2025, 5, 10, 9, 17, 42, 0, time.UTC)

// makeTar builds a tar from entries. Missing fields get mmdebstrap-like
// defaults ("./" names, root owner, mode 0644/0755).
func makeTar(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, ModTime: e.mtime,
			Uname: e.uname, PAXRecords: e.pax}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.ModTime.IsZero() {
			h.ModTime = testEpoch.Add(-time.Hour)
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sampleRootfs is a small tree with the entry kinds a Debian rootfs has.
func sampleRootfs(t *testing.T) []byte {
	return makeTar(t, []entry{
		{name: "./", typ: tar.TypeDir},
		{name: "./bin", typ: tar.TypeSymlink, link: "usr/bin"},
		{name: "./etc/", typ: tar.TypeDir},
		{name: "./etc/hostname.d/", typ: tar.TypeDir, mode: 0o700},
		{name: "./etc/motd", body: "hello\n", mtime: testEpoch.Add(48 * time.Hour)}, // in the future: clamped
		{name: "./tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "./usr/", typ: tar.TypeDir},
		{name: "./usr/bin/", typ: tar.TypeDir},
		{name: "./usr/bin/tool", body: "#!/bin/sh\necho tool\n", mode: 0o4755},
		{name: "./usr/bin/tool-alias", typ: tar.TypeLink, link: "./usr/bin/tool"},
		{name: "./usr/bin/abs", typ: tar.TypeSymlink, link: "/usr/bin/tool"},
		{name: "./run/", typ: tar.TypeDir},
		{name: "./run/fifo", typ: tar.TypeFifo, mode: 0o600},
		{name: "./usr/share/ünïcode.txt", body: "x", uname: "root"},
	})
}

func testRecipe(name string) *Recipe {
	return &Recipe{Name: name, Suite: "bookworm", Mirror: DefaultMirror, Variant: DefaultVariant,
		Packages: []string{"bash"}, Interpreters: []string{"bash", "sh"}, File: "test:" + name + ".hcl"}
}

func openTestStore(t *testing.T) *Store {
	t.Helper()
	s, err := OpenStore(filepath.Join(t.TempDir(), "store"), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeMmdebstrap writes a script standing in for mmdebstrap: it finds the
// target after "--" and the suite, and tars srcDir into it (or fails with a
// message when srcDir is "fail").
func fakeMmdebstrap(t *testing.T, srcDir string) string {
	t.Helper()
	script := `#!/bin/sh
echo "I: fake mmdebstrap starting" >&2
if [ "$FAKE_SRC" = fail ]; then echo "E: cannot reach the mirror" >&2; exit 1; fi
while [ "$1" != "--" ]; do shift; done
target="$3"
echo "I: SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH" >&2
exec tar -C "$FAKE_SRC" --numeric-owner -cf "$target" .
`
	p := filepath.Join(t.TempDir(), "mmdebstrap")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_SRC", srcDir)
	t.Setenv("SOURCE_DATE_EPOCH", "1746868662") // keep tests off the network
	return p
}

// writeTree makes a small directory tree for the fake mmdebstrap to tar.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
