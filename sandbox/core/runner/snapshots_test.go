//go:build linux

package runner_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/skills"
)

func snapshotSkill(t *testing.T, script string) *skills.Skill {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pinned")
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: pinned\ndescription: d\n---\nbody\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "scripts", "run.py"), []byte(script), 0o644)
	d, err := skills.Digest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &skills.Skill{Name: "pinned", Dir: dir, Digest: d}
}

func newSnapshotStore(t *testing.T) *runner.SnapshotStore {
	s := &runner.SnapshotStore{Dir: filepath.Join(t.TempDir(), "snapshots")}
	t.Cleanup(func() { s.Prune(-time.Hour) })
	return s
}

func TestSnapshotStorePinsTheIndexedVersion(t *testing.T) {
	s := newSnapshotStore(t)
	sk := snapshotSkill(t, "print('approved')\n")
	root, err := s.Pin(sk)
	if err != nil {
		t.Fatal(err)
	}
	// The copy has the skill's digest and the author's modes: a template
	// copied into /work by the script stays editable there.
	if d, err := skills.Digest(root); err != nil || d != sk.Digest {
		t.Fatalf("copy digest %s (%v), want %s", d, err, sk.Digest)
	}
	st, _ := os.Stat(filepath.Join(root, "scripts", "run.py"))
	if st.Mode().Perm() != 0o644 {
		t.Errorf("copied script has mode %v, want the source's 0644", st.Mode())
	}
	// Changing the live directory changes nothing in the copy.
	os.WriteFile(filepath.Join(sk.Dir, "scripts", "run.py"), []byte("print('swapped')\n"), 0o644)
	b, _ := os.ReadFile(filepath.Join(root, "scripts", "run.py"))
	if string(b) != "print('approved')\n" {
		t.Fatalf("copy follows the live file: %q", b)
	}
	// The same version again is the same copy (no second copy made).
	again, err := s.Pin(sk)
	if err != nil || again != root {
		t.Fatalf("second pin %q %v, want %q", again, err, root)
	}
}

func TestSnapshotStoreRefusesAChangedSkill(t *testing.T) {
	s := newSnapshotStore(t)
	sk := snapshotSkill(t, "print('approved')\n")
	// The file changes after indexing, before the first run.
	os.WriteFile(filepath.Join(sk.Dir, "scripts", "run.py"), []byte("print('swapped')\n"), 0o644)
	_, err := s.Pin(sk)
	if !errors.Is(err, runner.ErrSkillChanged) || !errors.Is(err, api.ErrInvalidParams) {
		t.Fatalf("pin of a changed skill: %v, want runner.ErrSkillChanged (invalid_params)", err)
	}
	entries, _ := os.ReadDir(s.Dir)
	if len(entries) != 1 || entries[0].Name() != ".key" { // the naming key stays

		t.Errorf("a refused copy was left behind: %v", entries)
	}
}

func TestSnapshotStorePrune(t *testing.T) {
	s := newSnapshotStore(t)
	old, err := s.Pin(snapshotSkill(t, "print(1)\n"))
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := s.Pin(snapshotSkill(t, "print(2)\n"))
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-48 * time.Hour)
	os.Chtimes(old, past, past)
	n, err := s.Prune(24 * time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("prune removed %d (%v), want 1", n, err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Error("unused copy survived the prune")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("recently used copy was pruned")
	}
}

// Prepare reads the script from the pinned copy and the job mounts it.
func TestPrepareUsesThePinnedCopy(t *testing.T) {
	store := newSnapshotStore(t)
	eng, _ := newTestEngine(t, "", func(o *runner.Options) { o.Pins = store })
	sk := snapshotSkill(t, "print('approved')\n")
	p, err := eng.Prepare(runner.RunRequest{Skill: sk, Script: "scripts/run.py"})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p.SkillRoot()) != store.Dir {
		t.Errorf("plan mounts %s, want a copy under %s", p.SkillRoot(), store.Dir)
	}
	if p.ScriptSHA256() != sha256Hex([]byte("print('approved')\n")) {
		t.Errorf("script hash %s is not the pinned bytes'", p.ScriptSHA256())
	}
}

// TestSnapshotStoreDirIsPrivate: the copies' directory is 0700, and one
// an older skillbox left 0711 is closed at the next pin.
func TestSnapshotStoreDirIsPrivate(t *testing.T) {
	s := newSnapshotStore(t)
	if err := os.Mkdir(s.Dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.Dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pin(snapshotSkill(t, "print('x')\n")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(s.Dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("snapshot dir %v %v, want 0700", st.Mode(), err)
	}
}
