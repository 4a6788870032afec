package checkpoint

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCopyTree(t *testing.T) {
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600))
	src := t.TempDir()
	must(t, os.Chmod(src, os.ModeSticky|0o777))
	must(t, os.WriteFile(filepath.Join(src, "a.txt"), []byte("hello"), 0o640))
	must(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Mkdir(filepath.Join(src, "ro"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "ro", "f"), []byte("x"), 0o444))
	must(t, os.Chmod(filepath.Join(src, "ro"), 0o555))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "abs-link")))
	must(t, os.Symlink("../../"+filepath.Base(outside), filepath.Join(src, "rel-link")))
	must(t, os.Symlink(outside, filepath.Join(src, "dir-link")))
	must(t, os.Symlink("dangling", filepath.Join(src, "dangling")))
	must(t, unix.Mkfifo(filepath.Join(src, "pipe"), 0o600))
	must(t, os.Chmod(filepath.Join(src, "pipe"), 0o620))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(filepath.Join(src, "a.txt"), old, old))
	// A socket: skipped and reported. Its path must fit sun_path.
	sockDir, err := os.MkdirTemp("", "cks")
	must(t, err)
	defer os.RemoveAll(sockDir)
	l, err := net.Listen("unix", filepath.Join(sockDir, "s"))
	must(t, err)
	defer l.Close()
	must(t, os.Mkdir(filepath.Join(src, "sub"), 0o700))
	must(t, os.Rename(filepath.Join(sockDir, "s"), filepath.Join(src, "sub", "sock")))
	if os.Geteuid() == 0 {
		must(t, unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		must(t, os.Lchown(filepath.Join(src, "a.txt"), 65534, 65534))
		must(t, os.Lchown(filepath.Join(src, "abs-link"), 65534, 65534))
	}

	dst := filepath.Join(t.TempDir(), "copy")
	t.Cleanup(func() { // let TempDir remove them
		os.Chmod(filepath.Join(src, "ro"), 0o755)
		os.Chmod(filepath.Join(dst, "ro"), 0o755)
	})
	skipped, err := CopyTree(src, dst)
	must(t, err)
	wantSkipped := "sub/sock"
	if os.Geteuid() == 0 {
		wantSkipped = "null sub/sock"
	}
	if got := strings.Join(sortedCopy(skipped), " "); got != wantSkipped {
		t.Errorf("skipped %q, want %q", got, wantSkipped)
	}

	for _, tc := range []struct {
		name string
		mode os.FileMode
		link string
		data string
	}{
		{name: ".", mode: os.ModeDir | os.ModeSticky | 0o777},
		{name: "a.txt", mode: 0o640, data: "hello"},
		{name: "run.sh", mode: 0o755, data: "#!/bin/sh\n"},
		{name: "ro", mode: os.ModeDir | 0o555},
		{name: "ro/f", mode: 0o444, data: "x"},
		{name: "abs-link", mode: os.ModeSymlink, link: filepath.Join(outside, "secret")},
		{name: "rel-link", mode: os.ModeSymlink, link: "../../" + filepath.Base(outside)},
		{name: "dir-link", mode: os.ModeSymlink, link: outside},
		{name: "dangling", mode: os.ModeSymlink, link: "dangling"},
		{name: "pipe", mode: os.ModeNamedPipe | 0o620},
		{name: "sub", mode: os.ModeDir | 0o700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dst, tc.name)
			st, err := os.Lstat(p)
			must(t, err)
			if tc.mode&os.ModeSymlink != 0 {
				if st.Mode()&os.ModeSymlink == 0 {
					t.Fatalf("%s is a %v, want a link (never followed)", tc.name, st.Mode())
				}
				if got, _ := os.Readlink(p); got != tc.link {
					t.Errorf("link to %q, want %q", got, tc.link)
				}
				return
			}
			if st.Mode() != tc.mode {
				t.Errorf("mode %v, want %v", st.Mode(), tc.mode)
			}
			if tc.data != "" {
				if b, _ := os.ReadFile(p); string(b) != tc.data {
					t.Errorf("contents %q", b)
				}
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(dst, "sub", "sock")); !os.IsNotExist(err) {
		t.Errorf("socket copied: %v", err)
	}
	if st, _ := os.Stat(filepath.Join(dst, "a.txt")); !st.ModTime().Equal(old) {
		t.Errorf("mtime %v, want %v", st.ModTime(), old)
	}
	if os.Geteuid() == 0 {
		for _, name := range []string{"a.txt", "abs-link"} {
			st, _ := os.Lstat(filepath.Join(dst, name))
			if s := st.Sys().(*syscall.Stat_t); s.Uid != 65534 || s.Gid != 65534 {
				t.Errorf("%s owned by %d:%d, want 65534:65534", name, s.Uid, s.Gid)
			}
		}
	}
	// Nothing outside was touched or copied through a link.
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("outside dir now holds %v", ents)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestCopyTreeRefuses(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644))
	t.Run("source link", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "l")
		must(t, os.Symlink(src, link))
		if _, err := CopyTree(link, filepath.Join(t.TempDir(), "d")); err == nil || !strings.Contains(err.Error(), "not a link") {
			t.Fatalf("CopyTree of a link = %v", err)
		}
	})
	t.Run("target link", func(t *testing.T) {
		target := t.TempDir()
		link := filepath.Join(t.TempDir(), "l")
		must(t, os.Symlink(target, link))
		if _, err := CopyTree(src, link); err == nil {
			t.Fatal("CopyTree into a link succeeded")
		}
		if ents, _ := os.ReadDir(target); len(ents) != 0 {
			t.Errorf("copied through the link: %v", ents)
		}
	})
	t.Run("target not empty", func(t *testing.T) {
		dst := t.TempDir()
		must(t, os.WriteFile(filepath.Join(dst, "old"), nil, 0o644))
		if _, err := CopyTree(src, dst); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("CopyTree into a full dir = %v", err)
		}
	})
	t.Run("target empty", func(t *testing.T) {
		dst := t.TempDir()
		if _, err := CopyTree(src, dst); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dst, "f")); string(b) != "x" {
			t.Errorf("f = %q", b)
		}
	})
}
