package skills

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLockRoundTrip(t *testing.T) {
	dir := patchSkill(t)
	dg, err := Digest(dir)
	if err != nil {
		t.Fatal(err)
	}
	sk := &Skill{Name: "demo", Dir: dir, Digest: dg, Location: filepath.Join(dir, "SKILL.md")}
	path := filepath.Join(t.TempDir(), "state", "skills.lock")

	l, err := ReadLock(path)
	if !errors.Is(err, os.ErrNotExist) || l == nil || len(l.Skills) != 0 {
		t.Fatalf("missing lock: %+v %v", l, err)
	}
	if err := l.Check(sk, path); !errors.Is(err, ErrNotLocked) || !strings.Contains(err.Error(), "not in the lock file") {
		t.Errorf("unpinned: %v", err)
	}
	if err := l.Pin(sk, "alice", time.Unix(1e9, 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(path); err != nil {
		t.Fatal(err)
	}
	l, err = ReadLock(path)
	if err != nil || l.Skills["demo"].ApprovedBy != "alice" || len(l.Skills["demo"].Files) != 2 {
		t.Fatalf("read back: %+v %v", l, err)
	}
	if err := l.Check(sk, path); err != nil {
		t.Errorf("pinned: %v", err)
	}

	// One byte changes.
	if err := os.WriteFile(filepath.Join(dir, "scripts/run.sh"), []byte("echo One\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cur := *sk
	if cur.Digest, err = Digest(dir); err != nil {
		t.Fatal(err)
	}
	err = l.Check(&cur, path)
	for _, want := range []string{dg, cur.Digest, "skillbox skills diff --lock " + path + " demo", "alice"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("changed skill: %v, want %q named", err, want)
		}
	}
	m, err := Manifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	changes := DiffManifests(l.Skills["demo"].Files, m)
	if len(changes) != 1 || changes[0].Path != "scripts/run.sh" || changes[0].Change != "modified" {
		t.Errorf("changes: %+v", changes)
	}

	for name, content := range map[string]string{"garbage": "{", "future": `{"version": 99, "skills": {}}`} {
		bad := filepath.Join(t.TempDir(), name)
		os.WriteFile(bad, []byte(content), 0o644)
		if _, err := ReadLock(bad); err == nil || errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s lock file: %v", name, err)
		}
	}
}
