package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// sparseSize is the apparent size of the sparse file the tests make: a
// tmpfs /work can hold it in no blocks at all.
const sparseSize = 1 << 40

// allocated is the disk a file or tree uses (st_blocks), in bytes.
func allocated(t *testing.T, p string) int64 {
	t.Helper()
	var n int64
	seen := map[uint64]bool{}
	must(t, filepath.Walk(p, func(q string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if !seen[st.Ino] {
			seen[st.Ino] = true
			n += st.Blocks * 512
		}
		return nil
	}))
	return n
}

func TestCopyTreeKeepsHoles(t *testing.T) {
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "sparse"))
	must(t, err)
	// Data at the start, in the middle and at the end, holes between.
	for _, off := range []int64{0, sparseSize / 2, sparseSize - 5} {
		_, err := f.WriteAt([]byte("hello"), off)
		must(t, err)
	}
	must(t, f.Close())
	dst := filepath.Join(t.TempDir(), "copy")
	if _, err := CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dst, "sparse"))
	must(t, err)
	if st.Size() != sparseSize {
		t.Fatalf("copy is %d bytes, want %d", st.Size(), int64(sparseSize))
	}
	if got := allocated(t, filepath.Join(dst, "sparse")); got > 1<<20 {
		t.Fatalf("the copy of a sparse file allocates %d bytes: its holes were filled", got)
	}
	g, err := os.Open(filepath.Join(dst, "sparse"))
	must(t, err)
	defer g.Close()
	for _, off := range []int64{0, sparseSize / 2, sparseSize - 5} {
		b := make([]byte, 5)
		if _, err := g.ReadAt(b, off); err != nil || string(b) != "hello" {
			t.Fatalf("at %d: %q, %v", off, b, err)
		}
	}
}

func TestCopyTreeKeepsHardLinks(t *testing.T) {
	src := t.TempDir()
	must(t, os.Mkdir(filepath.Join(src, "d"), 0o755))
	first := filepath.Join(src, "target")
	must(t, os.WriteFile(first, make([]byte, 1<<20), 0o644))
	for i := 0; i < 1000; i++ {
		dir := src
		if i%2 == 1 {
			dir = filepath.Join(src, "d")
		}
		must(t, os.Link(first, filepath.Join(dir, fmt.Sprintf("link-%04d", i))))
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if _, err := CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	var want unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dst, "target"), &want))
	if want.Nlink != 1001 {
		t.Errorf("the copy's target has %d links, want 1001", want.Nlink)
	}
	for _, rel := range []string{"link-0000", "d/link-0001", "d/link-0999"} {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(dst, rel), &st))
		if st.Ino != want.Ino {
			t.Errorf("%s is inode %d, not a link to target (%d)", rel, st.Ino, want.Ino)
		}
	}
	if got := allocated(t, dst); got > 2<<20 {
		t.Errorf("the copy allocates %d bytes for one 1 MiB file and its links", got)
	}
}
