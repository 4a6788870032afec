package skills

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

func TestManifest(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"SKILL.md":             "---\nname: m\ndescription: d\n---\nbody\n",
		"scripts/run.sh":       "echo hi\n",
		"references/a/deep.md": "deep",
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(dir, "hardlink")); err != nil {
		t.Fatal(err)
	}

	got, err := Manifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"SKILL.md", "references/a/deep.md", "scripts/run.sh"}
	if len(got) != len(want) {
		t.Fatalf("Manifest = %+v, want paths %v", got, want)
	}
	for i, e := range got {
		sum := sha256.Sum256([]byte(files[e.Path]))
		if e.Path != want[i] || e.Size != int64(len(files[e.Path])) || e.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("entry %d = %+v, want %s with its size and sha256", i, e, want[i])
		}
	}
}
