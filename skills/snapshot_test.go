//go:build linux

package skills

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// snapshotDst makes an empty destination that the test can clean up even
// after Snapshot took the write bits off everything in it.
func snapshotDst(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "snap")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o700)
			}
			return nil
		})
	})
	return dst
}

func TestSnapshotDigestMatchesDigest(t *testing.T) {
	src := filepath.Join(t.TempDir(), "full-skill")
	if out, err := exec.Command("cp", "-a", filepath.Join("testdata", "valid", "full-skill"), src).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	// Everything Digest tells apart: nested and empty dirs, exec bits,
	// symlinks (inside, outside, dangling), a FIFO, an empty file.
	os.MkdirAll(filepath.Join(src, "assets", "empty"), 0o755)
	os.WriteFile(filepath.Join(src, "assets", "empty.txt"), nil, 0o644)
	os.WriteFile(filepath.Join(src, "scripts", "tool.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.WriteFile(filepath.Join(src, "assets", "secret.txt"), []byte("owner only\n"), 0o600)
	os.WriteFile(filepath.Join(src, "assets", "template.docx"), []byte("a template\n"), 0o644)
	os.WriteFile(filepath.Join(src, "assets", "shared.txt"), []byte("group and others may write\n"), 0o644)
	os.Chmod(filepath.Join(src, "assets", "shared.txt"), 0o666)
	os.WriteFile(filepath.Join(src, "scripts", "setuid.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.Chmod(filepath.Join(src, "scripts", "setuid.sh"), 0o4755|0o2000)
	os.MkdirAll(filepath.Join(src, "assets", "private"), 0o700)
	os.Symlink("../references/guide.md", filepath.Join(src, "assets", "guide"))
	os.Symlink("/etc/passwd", filepath.Join(src, "assets", "passwd"))
	os.Symlink("nowhere", filepath.Join(src, "assets", "dangling"))
	if err := syscall.Mkfifo(filepath.Join(src, "assets", "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := Digest(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := snapshotDst(t)
	got, err := Snapshot(src, dst, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("Snapshot digest %s, Digest %s", got, want)
	}

	// The copy holds the same bytes and links, the author's modes (without
	// group or other write and special bits), no FIFO (blocking opens stay
	// out of a run's skill), and links are not followed.
	b, err := os.ReadFile(filepath.Join(dst, "scripts", "tool.sh"))
	if err != nil || string(b) != "#!/bin/sh\necho hi\n" {
		t.Fatalf("copied script = %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "assets", "passwd")); err != nil || l != "/etc/passwd" {
		t.Fatalf("symlink copied as %q, %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "assets", "pipe")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("FIFO was copied: %v", err)
	}
	wantPerm := map[string]fs.FileMode{
		"scripts": 0o755, "scripts/tool.sh": 0o755, "assets/template.docx": 0o644,
		"assets/secret.txt": 0o600, "assets/shared.txt": 0o644, "scripts/setuid.sh": 0o755, "assets/private": 0o700,
	}
	for rel, perm := range wantPerm {
		fi, err := os.Lstat(filepath.Join(dst, rel))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != perm {
			t.Errorf("%s: mode %v, want %v", rel, fi.Mode(), perm)
		}
	}
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := d.Info(); d.Type()&fs.ModeSymlink == 0 && fi.Mode()&(0o022|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Errorf("%s is writable by group or others, or has a special bit, in the snapshot: %v", p, fi.Mode())
		}
		return nil
	})
	// Apart from the FIFO it left out, the copy is the same version.
	if err := os.Remove(filepath.Join(src, "assets", "pipe")); err != nil {
		t.Fatal(err)
	}
	want, err = Digest(src)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Digest(dst); err != nil || again != want {
		t.Errorf("Digest of the snapshot = %s, %v; want %s", again, err, want)
	}
}

func TestSnapshotNeverFollowsLinks(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host file\n"), 0o644)
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "SKILL.md"), []byte("---\nname: x\ndescription: y\n---\n"), 0o644)
	// scripts is a symlink to a directory outside the skill.
	os.Symlink(outside, filepath.Join(src, "scripts"))
	dst := snapshotDst(t)
	if _, err := Snapshot(src, dst, 1<<20); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "scripts")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("scripts in the snapshot: %v, %v; want the symlink itself", fi, err)
	}
}

func TestSnapshotSizeCap(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "SKILL.md"), []byte("---\nname: x\ndescription: y\n---\n"), 0o644)
	// A sparse file: large on paper, nothing on disk.
	f, err := os.Create(filepath.Join(src, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(1 << 40)
	f.Close()
	_, err = Snapshot(src, snapshotDst(t), 1<<20)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Snapshot of a 1 TiB skill with a 1 MiB cap: %v, want ErrTooLarge", err)
	}
}
