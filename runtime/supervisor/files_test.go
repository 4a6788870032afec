package supervisor

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/tarstream"
)

// fileServer is a real Serve in this process over in-memory pipes, its
// file roots two temp dirs.
type fileServer struct {
	c            *Client
	work, skills string
	base         string
}

func serveFiles(t *testing.T) *fileServer {
	t.Helper()
	base := t.TempDir()
	fs := &fileServer{base: base, work: filepath.Join(base, "work"), skills: filepath.Join(base, "skills")}
	for _, d := range []string{fs.work, fs.skills} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	oldRoots := fileRoots
	fileRoots = []string{fs.work, fs.skills}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := Serve(context.Background(), inR, outW, Options{RunsDir: filepath.Join(base, "runs")})
		outW.CloseWithError(io.EOF)
		done <- err
	}()
	fs.c = NewClient(inW, outR)
	t.Cleanup(func() {
		fs.c.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		fileRoots = oldRoots
		_ = filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				_ = os.Chmod(p, 0o700) // a read-only put, for a test not run as root
			}
			return nil
		})
	})
	if _, err := fs.c.Ready(ctxFiles(t)); err != nil {
		t.Fatal(err)
	}
	return fs
}

func ctxFiles(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// inputTar is the tar stream of files, with its size and digest.
func inputTar(t *testing.T, files []runtime.InputFile) ([]byte, int64, string) {
	t.Helper()
	var b bytes.Buffer
	now := time.Unix(1700000000, 0)
	if err := tarstream.WriteInputTar(&b, files, now); err != nil {
		t.Fatal(err)
	}
	size, digest, err := tarstream.Measure(func(w io.Writer) error { return tarstream.WriteInputTar(w, files, now) })
	if err != nil || size != int64(b.Len()) || digest != tarstream.Digest(b.Bytes()) {
		t.Fatalf("measure: %d %s %v, want the stream's %d %s", size, digest, err, b.Len(), tarstream.Digest(b.Bytes()))
	}
	return b.Bytes(), size, digest
}

// rawTar is a tar stream of hdrs, each with its data.
func rawTar(t *testing.T, hdrs []tar.Header, data map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		h.Size = int64(len(data[h.Name]))
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Uid == 0 && os.Geteuid() != 0 {
			h.Uid, h.Gid = os.Geteuid(), os.Getegid()
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
	return b.Bytes()
}

// tree is every path under dir with its kind, mode and content.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		s := rel + " " + fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			if len(b) > 32 {
				b = b[:32]
			}
			s += " " + string(b)
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			s += " -> " + l
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func empty(t *testing.T, dir string) {
	t.Helper()
	if got := tree(t, dir); len(got) != 0 {
		t.Errorf("%s holds %q, want nothing left", dir, got)
	}
}

func TestPutCollectRoundTrip(t *testing.T) {
	fs := serveFiles(t)
	big := bytes.Repeat([]byte("0123456789"), 70<<10) // several put_data frames
	files := []runtime.InputFile{
		{Name: "a.txt", Data: []byte("a")},
		{Name: "deep/er/b.sh", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Name: "deep/link", Kind: runtime.InputSymlink, Target: "../a.txt"},
		{Name: "big.bin", Data: big},
	}
	stream, size, digest := inputTar(t, files)
	if size <= 2*PutChunk {
		t.Fatalf("stream of %d bytes: want it over several frames", size)
	}
	p, err := fs.c.Put(ctxFiles(t), fs.work, bytes.NewReader(stream), digest, size)
	if err != nil {
		t.Fatal(err)
	}
	if p.Entries != 7 || p.Size != size {
		t.Errorf("put %+v, want 7 entries of %d bytes", p, size)
	}
	want := []string{"a.txt -rw-r--r-- a", "big.bin -rw-r--r-- 01234567890123456789012345678901", "deep drwxr-xr-x", "deep/er drwxr-xr-x",
		"deep/er/b.sh -rwxr-xr-x #!/bin/sh\n", "deep/link Lrwxrwxrwx -> ../a.txt", "outputs drwxr-xr-x"}
	if got := tree(t, fs.work); !slices.Equal(got, want) {
		t.Errorf("put made\n%q\nwant\n%q", got, want)
	}
	if os.Geteuid() == 0 {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(fs.work, "deep/link"), &st); err != nil || st.Uid != runtime.ContainerUID {
			t.Errorf("deep/link owned by %d (%v), want the stream's %d", st.Uid, err, runtime.ContainerUID)
		}
	}

	// The job writes an output; the workdir comes back.
	if err := os.WriteFile(filepath.Join(fs.work, "outputs", "r.txt"), []byte("result"), 0o644); err != nil {
		t.Fatal(err)
	}
	into := t.TempDir()
	col, err := fs.c.CollectInto(ctxFiles(t), fs.work, 8<<20, into)
	if err != nil {
		t.Fatal(err)
	}
	if col.Truncated || len(col.Notes) != 0 || len(col.Skipped) != 0 {
		t.Errorf("collected %+v, want it whole", col)
	}
	got := tree(t, into)
	for _, w := range []string{"a.txt", "big.bin", "deep/er/b.sh", "deep/link Lrwxrwxrwx -> ../a.txt", "outputs/r.txt"} {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, w) }) {
			t.Errorf("collected %q: want %s", got, w)
		}
	}
	b, _ := os.ReadFile(filepath.Join(into, "big.bin"))
	if !bytes.Equal(b, big) {
		t.Errorf("big.bin came back as %d bytes, want the %d put", len(b), len(big))
	}

	// Clear empties it for the next run.
	if err := fs.c.Clear(ctxFiles(t), fs.work); err != nil {
		t.Fatal(err)
	}
	empty(t, fs.work)
}

func TestPutRefused(t *testing.T) {
	fs := serveFiles(t)
	outside := t.TempDir()
	good, goodSize, goodDigest := inputTar(t, []runtime.InputFile{{Name: "x", Data: []byte("x")}})
	unsafe := func(hdrs []tar.Header, data map[string]string) func() ([]byte, int64, string) {
		return func() ([]byte, int64, string) {
			s := rawTar(t, hdrs, data)
			return s, int64(len(s)), tarstream.Digest(s)
		}
	}
	for _, tc := range []struct {
		name   string
		dir    string
		stream func() ([]byte, int64, string)
		want   string
	}{
		{"wrong digest", "", func() ([]byte, int64, string) { return good, goodSize, tarstream.Digest([]byte("other")) }, "digest"},
		{"longer than stated", "", func() ([]byte, int64, string) { return good, goodSize - 512, goodDigest }, "longer than the"},
		{"shorter than stated", "", func() ([]byte, int64, string) { return good, goodSize + 10, goodDigest }, "ended after"},
		{"over the agent's bound", "", func() ([]byte, int64, string) { return good, maxPutBytes + 1, goodDigest }, "at most"},
		{"dotdot", "", unsafe([]tar.Header{{Name: "../up", Typeflag: tar.TypeReg}}, map[string]string{"../up": "u"}), `".."`},
		{"absolute", "", unsafe([]tar.Header{{Name: "/etc/x", Typeflag: tar.TypeReg}}, nil), "absolute"},
		{"through a symlink", "", unsafe([]tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "l/x", Typeflag: tar.TypeReg}}, nil), "a symlink"},
		{"hard link out", "", unsafe([]tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../../etc/passwd"}}, nil), `".."`},
		{"device", "", unsafe([]tar.Header{{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}, nil), "device"},
		{"outside the roots", "/etc", func() ([]byte, int64, string) { return good, goodSize, goodDigest }, "not under"},
		{"beside a root", "WORK-x", func() ([]byte, int64, string) { return good, goodSize, goodDigest }, "not under"},
		{"unclean", "WORK/a/../../x", func() ([]byte, int64, string) { return good, goodSize, goodDigest }, "not a clean absolute path"},
		{"relative", "work", func() ([]byte, int64, string) { return good, goodSize, goodDigest }, "not a clean absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := strings.Replace(tc.dir, "WORK", fs.work, 1)
			if dir == "" {
				dir = fs.work
			}
			stream, size, digest := tc.stream()
			_, err := fs.c.Put(ctxFiles(t), dir, bytes.NewReader(stream), digest, size)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("put: %v, want refused with %q", err, tc.want)
			}
			empty(t, fs.work)
			empty(t, outside)
			if ents, _ := os.ReadDir(fs.base); len(ents) != 2 {
				t.Errorf("beside the roots: %v", ents)
			}
		})
	}
	// The connection is still good.
	if _, err := fs.c.Put(ctxFiles(t), fs.work, bytes.NewReader(good), goodDigest, goodSize); err != nil {
		t.Fatalf("put after the refusals: %v", err)
	}
}

// A put into a workdir that holds an earlier run's files replaces files
// and keeps directories; a directory where the stream has a file fails
// before anything moves.
func TestPutMerges(t *testing.T) {
	fs := serveFiles(t)
	put := func(files []runtime.InputFile) error {
		s, size, digest := inputTar(t, files)
		_, err := fs.c.Put(ctxFiles(t), fs.work, bytes.NewReader(s), digest, size)
		return err
	}
	if err := put([]runtime.InputFile{{Name: "keep/old", Data: []byte("old")}, {Name: "f", Data: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	if err := put([]runtime.InputFile{{Name: "keep/new", Data: []byte("new")}, {Name: "f", Data: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"f -rw-r--r-- 2", "keep drwxr-xr-x", "keep/new -rw-r--r-- new", "keep/old -rw-r--r-- old", "outputs drwxr-xr-x"}
	if got := tree(t, fs.work); !slices.Equal(got, want) {
		t.Errorf("after two puts\n%q\nwant\n%q", got, want)
	}
	err := put([]runtime.InputFile{{Name: "a", Data: []byte("a")}, {Name: "keep", Data: []byte("a file")}})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "keep: a directory there") {
		t.Errorf("put of a file over a directory: %v", err)
	}
	if got := tree(t, fs.work); !slices.Equal(got, want) {
		t.Errorf("after a refused put\n%q\nwant it unchanged\n%q", got, want)
	}

	// Links the job left are replaced or refused, never followed.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"flink": filepath.Join(outside, "secret"), "dlink": outside} {
		if err := os.Symlink(target, filepath.Join(fs.work, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := put([]runtime.InputFile{{Name: "flink", Data: []byte("mine")}}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(fs.work, "flink")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("flink after the put: %v %v, want the link replaced by a file", fi.Mode(), err)
	}
	err = put([]runtime.InputFile{{Name: "dlink/x", Data: []byte("x")}})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "dlink: a directory in the stream") {
		t.Errorf("put through a job's link to a directory: %v, want refused", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "s" {
		t.Errorf("the link's target was written: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("a put wrote through a link: %v", ents)
	}
}

func TestPutReadOnly(t *testing.T) {
	fs := serveFiles(t)
	s := rawTar(t, []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o777},
		{Name: "./run.py", Typeflag: tar.TypeReg, Mode: 0o4777},
		{Name: "./lib/", Typeflag: tar.TypeDir, Mode: 0o777},
		{Name: "./lib/m.py", Typeflag: tar.TypeReg, Mode: 0o666},
	}, map[string]string{"./run.py": "print(1)", "./lib/m.py": "x = 1"})
	dir := filepath.Join(fs.skills, "s1")
	if _, err := fs.c.Put(ctxFiles(t), dir, bytes.NewReader(s), tarstream.Digest(s), int64(len(s)), ReadOnly()); err != nil {
		t.Fatal(err)
	}
	want := []string{"lib dr-xr-xr-x", "lib/m.py -r--r--r-- x = 1", "run.py -r-xr-xr-x print(1)"}
	if got := tree(t, dir); !slices.Equal(got, want) {
		t.Errorf("read-only put\n%q\nwant\n%q", got, want)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("the put's directory: %v %v, want it made read-only", fi.Mode(), err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "lib/m.py"), &st); err != nil || int(st.Uid) != os.Geteuid() {
		t.Errorf("lib/m.py owned by %d, want the agent's %d", st.Uid, os.Geteuid())
	}
}

func TestCollectTruncated(t *testing.T) {
	fs := serveFiles(t)
	stream, size, digest := inputTar(t, []runtime.InputFile{
		{Name: "a", Data: []byte("a")},
		{Name: "b", Data: bytes.Repeat([]byte("b"), 200<<10)},
		{Name: "c", Data: []byte("c")},
	})
	if _, err := fs.c.Put(ctxFiles(t), fs.work, bytes.NewReader(stream), digest, size); err != nil {
		t.Fatal(err)
	}
	const bound = 100 << 10
	var out bytes.Buffer
	col, err := fs.c.Collect(ctxFiles(t), fs.work, bound, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !col.Truncated || col.Omitted != "./b" || col.Size != int64(out.Len()) || col.Size > bound {
		t.Errorf("collected %+v (%d bytes) under a bound of %d: want it truncated before ./b", col, out.Len(), bound)
	}
	var names []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the truncated stream is not whole: %v", err)
		}
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{"./a"}) {
		t.Errorf("truncated stream holds %q, want ./a", names)
	}
	if _, err := fs.c.Collect(ctxFiles(t), "/etc", bound, io.Discard); !errors.Is(err, ErrRefused) {
		t.Errorf("collect /etc: %v, want refused", err)
	}
}

func TestClear(t *testing.T) {
	fs := serveFiles(t)
	s := rawTar(t, []tar.Header{{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "ro/f", Typeflag: tar.TypeReg}}, map[string]string{"ro/f": "f"})
	if _, err := fs.c.Put(ctxFiles(t), fs.work, bytes.NewReader(s), tarstream.Digest(s), int64(len(s)), ReadOnly()); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(fs.work, "link")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/etc", fs.work + "/../x", filepath.Join(fs.work, "link")} {
		if err := fs.c.Clear(ctxFiles(t), dir); !errors.Is(err, ErrRefused) {
			t.Errorf("clear %s: %v, want refused", dir, err)
		}
	}
	if err := fs.c.Clear(ctxFiles(t), fs.work); err != nil {
		t.Fatal(err)
	}
	empty(t, fs.work)
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("clear went through a link: %v", err)
	}
}
