package skills

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCompareWithLock(t *testing.T) {
	const script = "scripts/run.sh"
	big := strings.Repeat("a new line of the script\n", MaxLockDiffBytes/10)
	tests := []struct {
		name string
		// change edits the skill after it was pinned.
		change func(t *testing.T, dir string)
		// keep: the pin kept the locked content; pin: the skill is pinned.
		keep, pin  bool
		copy       bool // a copy of the pinned version is at hand
		status     LockStatus
		diffHas    []string
		notesHave  []string
		changes    int
		wantNoDiff bool
	}{
		{name: "no lock", pin: false, status: LockNone, wantNoDiff: true},
		{name: "matches", pin: true, keep: true, status: LockMatches, wantNoDiff: true},
		{name: "differs, content kept", pin: true, keep: true, status: LockDiffers, changes: 2,
			change: func(t *testing.T, dir string) {
				write(t, dir, script, "echo two\n")
				write(t, dir, "notes.txt", "new\n")
			},
			diffHas: []string{"--- a/scripts/run.sh", "+++ b/scripts/run.sh", "-echo one", "+echo two", "--- /dev/null", "+++ b/notes.txt", "+new"}},
		{name: "differs, content not kept", pin: true, keep: false, status: LockDiffers, changes: 1,
			change:     func(t *testing.T, dir string) { write(t, dir, script, "echo two\n") },
			notesHave:  []string{"scripts/run.sh: " + NoteHashesOnly + " (locked sha256:"},
			wantNoDiff: true},
		{name: "differs, content in a copy of the version", pin: true, keep: false, copy: true, status: LockDiffers, changes: 1,
			change:  func(t *testing.T, dir string) { write(t, dir, script, "echo two\n") },
			diffHas: []string{"-echo one", "+echo two"}},
		{name: "capped", pin: true, keep: true, status: LockDiffers, changes: 1,
			change:    func(t *testing.T, dir string) { write(t, dir, script, big) },
			diffHas:   []string{"-echo one", "+a new line of the script"},
			notesHave: []string{"diff capped: "}},
		{name: "binary", pin: true, keep: true, status: LockDiffers, changes: 1,
			change:     func(t *testing.T, dir string) { write(t, dir, script, "\x00\x01") },
			notesHave:  []string{"scripts/run.sh: not text, not diffed"},
			wantNoDiff: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := patchSkill(t)
			lockFile := filepath.Join(t.TempDir(), "skills.lock")
			store := LockContentDir(lockFile)
			l := &Lock{Version: LockVersion, Skills: map[string]LockEntry{}}
			if tt.pin {
				sk := loadDemo(t, dir)
				if err := l.Pin(sk, "alice", time.Unix(1e9, 0)); err != nil {
					t.Fatal(err)
				}
				if tt.keep {
					if err := KeepLockedFiles(store, dir, l.Skills["demo"].Files); err != nil {
						t.Fatal(err)
					}
				}
			}
			var copied LockedFiles
			if tt.copy {
				copied = VersionDir(copyDir(t, dir))
			}
			if tt.change != nil {
				tt.change(t, dir)
			}
			c, err := CompareWithLock(l, lockFile, loadDemo(t, dir), script, ContentStore(store), copied)
			if err != nil {
				t.Fatal(err)
			}
			if c.Status != tt.status || len(c.Changes) != tt.changes {
				t.Fatalf("status %q with %d changes, want %q with %d: %+v", c.Status, len(c.Changes), tt.status, tt.changes, c)
			}
			for _, s := range tt.diffHas {
				if !strings.Contains(c.Diff, s) {
					t.Errorf("diff lacks %q:\n%s", s, c.Diff)
				}
			}
			if tt.wantNoDiff && c.Diff != "" {
				t.Errorf("diff %q, want none", c.Diff)
			}
			if len(c.Diff) > MaxLockDiffBytes {
				t.Errorf("diff is %d bytes, more than %d", len(c.Diff), MaxLockDiffBytes)
			}
			notes := strings.Join(c.Notes, "\n")
			for _, s := range tt.notesHave {
				if !strings.Contains(notes, s) {
					t.Errorf("notes lack %q: %q", s, notes)
				}
			}
			if len(tt.notesHave) == 0 && notes != "" {
				t.Errorf("notes %q, want none", notes)
			}
		})
	}
}

func TestPruneContent(t *testing.T) {
	dir := patchSkill(t)
	store := filepath.Join(t.TempDir(), "content")
	l := &Lock{}
	if err := l.Pin(loadDemo(t, dir), "alice", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := KeepLockedFiles(store, dir, l.Skills["demo"].Files); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "scripts/run.sh", "echo two\n")
	if err := l.Pin(loadDemo(t, dir), "alice", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := KeepLockedFiles(store, dir, l.Skills["demo"].Files); err != nil {
		t.Fatal(err)
	}
	if err := l.PruneContent(store); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("%d files kept after the re-pin, want the 2 the lock names", len(entries))
	}
}

func loadDemo(t *testing.T, dir string) *Skill {
	t.Helper()
	dg, err := Digest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &Skill{Name: "demo", Dir: dir, Digest: dg}
}

func write(t *testing.T, dir, rel, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyDir copies the skill's two files of patchSkill.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if err := os.MkdirAll(filepath.Join(dst, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"SKILL.md", "scripts/run.sh"} {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		write(t, dst, rel, string(b))
	}
	return dst
}
