package skills

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestDigest(t *testing.T) {
	fixture := filepath.Join("testdata", "valid", "full-skill")
	base, err := Digest(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base, "sha256:") || len(base) != len("sha256:")+64 {
		t.Fatalf("digest = %q", base)
	}
	// copyFixture gives a fresh copy of the fixture to mutate.
	copyFixture := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "full-skill")
		if out, err := exec.Command("cp", "-a", fixture, dir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		return dir
	}
	tests := []struct {
		name   string
		mutate func(t *testing.T, dir string)
		same   bool
	}{
		{name: "copy elsewhere", mutate: func(*testing.T, string) {}, same: true},
		{name: "mtime only", mutate: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "SKILL.md")
			fi, _ := os.Stat(p)
			os.Chtimes(p, fi.ModTime().Add(3600e9), fi.ModTime().Add(3600e9))
		}, same: true},
		{name: "content", mutate: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "references", "guide.md"), []byte("# Guide!\n"), 0o644)
		}},
		{name: "new empty file", mutate: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "assets.txt"), nil, 0o644)
		}},
		{name: "new empty dir", mutate: func(t *testing.T, dir string) {
			os.Mkdir(filepath.Join(dir, "assets"), 0o755)
		}},
		{name: "rename", mutate: func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "references", "guide.md"), filepath.Join(dir, "references", "guide2.md"))
		}},
		{name: "exec bit", mutate: func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, "references", "guide.md"), 0o755)
		}},
		{name: "symlink", mutate: func(t *testing.T, dir string) {
			os.Symlink("references/guide.md", filepath.Join(dir, "link"))
		}},
		{name: "fifo", mutate: func(t *testing.T, dir string) {
			syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644)
		}},
		{name: "content moved between files", mutate: func(t *testing.T, dir string) {
			// Same bytes overall, different split: framing must tell them apart.
			os.WriteFile(filepath.Join(dir, "references", "guide.md"), []byte("# Guide\n#"), 0o644)
			b, _ := os.ReadFile(filepath.Join(dir, "scripts", "run.py"))
			os.WriteFile(filepath.Join(dir, "scripts", "run.py"), b[1:], 0o644)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyFixture(t)
			tt.mutate(t, dir)
			got, err := Digest(dir)
			if err != nil {
				t.Fatal(err)
			}
			if (got == base) != tt.same {
				t.Errorf("digest same = %v, want %v", got == base, tt.same)
			}
		})
	}

	t.Run("symlinks hashed as text, never followed", func(t *testing.T) {
		base := t.TempDir()
		target := filepath.Join(base, "target.txt")
		os.WriteFile(target, []byte("one"), 0o644)
		dir := filepath.Join(base, "s")
		os.Mkdir(dir, 0o755)
		os.Symlink(target, filepath.Join(dir, "link"))
		os.Symlink("/nonexistent/dangling", filepath.Join(dir, "dangling"))
		d1, err := Digest(dir)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(target, []byte("two"), 0o644)
		d2, _ := Digest(dir)
		if d1 != d2 {
			t.Error("digest followed a symlink")
		}
	})
	t.Run("stable", func(t *testing.T) {
		again, _ := Digest(fixture)
		if again != base {
			t.Error("digest is not stable")
		}
	})
}
