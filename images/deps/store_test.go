package deps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStoreCommitListPrune(t *testing.T) {
	s := OpenStore(t.TempDir())
	if ls, err := s.List(); err != nil || ls != nil {
		t.Fatalf("empty store: %v %v", ls, err)
	}
	if removed, err := s.Prune(func(*Layer) bool { return false }); err != nil || removed != nil {
		t.Fatalf("prune of an empty store: %v %v", removed, err)
	}
	mk := func(img string, set *Set) *Layer {
		t.Helper()
		stage, err := s.staging()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(stage, "tree", PythonDir, "pkg"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(stage, "tree", PythonDir, "pkg", "__init__.py"), []byte("X = 1\n"), 0o644)
		l, err := s.commit(stage, &Manifest{Digest: Key(img, set), Image: "python", ImageDigest: img})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	oldImg, newImg := "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64)
	set := &Set{Python: []Requirement{{Name: "pkg", Spec: "pkg"}}}
	a, b := mk(oldImg, set), mk(newImg, set)
	if a.Digest == b.Digest || a.Size != 6 {
		t.Fatalf("layers %+v %+v", a, b)
	}
	if err := s.AddUser(b.Digest, "sk", "sha256:aa"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(b.Digest); err != nil || got.Users["sk"] != "sha256:aa" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if ls, _ := s.List(); len(ls) != 2 {
		t.Fatalf("list: %d layers", len(ls))
	}
	removed, err := s.Prune(func(l *Layer) bool { return l.ImageDigest == newImg })
	if err != nil || len(removed) != 1 || !strings.Contains(removed[0], strings.TrimPrefix(a.Digest, "sha256:")) {
		t.Fatalf("prune removed %v (%v), want only the layer of the old image", removed, err)
	}
	if _, err := s.Get(a.Digest); err == nil {
		t.Error("pruned layer still there")
	}
	if _, err := s.Get(b.Digest); err != nil {
		t.Error("kept layer gone")
	}
	if _, err := s.Get("sha256:../../etc"); err == nil {
		t.Error("a digest that is not one is accepted")
	}
}
