package workspace

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/sandbox/api"
)

// fixture is a workspace directory and, beside it, a directory outside it
// with a canary file no test may read or change.
type fixture struct {
	t       testing.TB
	ws      string // the workspace
	outside string // beside it
	canary  string
	stamp   time.Time
}

const canaryData = "canary: nothing may read or change this\n"

func newFixture(t testing.TB) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{t: t, ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{f.ws, f.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.canary = filepath.Join(f.outside, "canary.txt")
	if err := os.WriteFile(f.canary, []byte(canaryData), 0o644); err != nil {
		t.Fatal(err)
	}
	// An mtime in the past, so a write in this second would show.
	f.stamp = time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(f.canary, f.stamp, f.stamp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.checkCanary)
	return f
}

// checkCanary fails the test if anything outside the workspace changed:
// the canary's content or mtime, or a new entry in the outside directory.
func (f *fixture) checkCanary() {
	t := f.t
	t.Helper()
	data, err := os.ReadFile(f.canary)
	if err != nil || string(data) != canaryData {
		t.Errorf("canary changed: %q, %v", data, err)
	}
	st, err := os.Lstat(f.canary)
	if err != nil || !st.ModTime().Equal(f.stamp) || !st.Mode().IsRegular() {
		t.Errorf("canary touched: %v %v", st, err)
	}
	ents, _ := os.ReadDir(f.outside)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !f.allowOutside(names) {
		t.Errorf("something was written outside the workspace: %v", names)
	}
}

// allowOutside lets tests that hardlink the canary keep their link name.
func (f *fixture) allowOutside(names []string) bool {
	for _, n := range names {
		if n != "canary.txt" && !strings.HasPrefix(n, "keep-") {
			return false
		}
	}
	return true
}

func (f *fixture) path(rel string) string { return filepath.Join(f.ws, filepath.FromSlash(rel)) }

func (f *fixture) file(rel, data string) {
	f.fileMode(rel, data, 0o644)
}

func (f *fixture) fileMode(rel, data string, mode os.FileMode) {
	f.t.Helper()
	p := f.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) dir(rel string) {
	f.t.Helper()
	if err := os.MkdirAll(f.path(rel), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) symlink(rel, target string) {
	f.t.Helper()
	p := f.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) fifo(rel string) {
	f.t.Helper()
	if err := unix.Mkfifo(f.path(rel), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) read(rel string) string {
	f.t.Helper()
	data, err := os.ReadFile(f.path(rel))
	if err != nil {
		f.t.Fatalf("read %s: %v", rel, err)
	}
	return string(data)
}

func (f *fixture) open() *Workspace {
	f.t.Helper()
	w, err := Open(f.ws)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { w.Close() })
	return w
}

// noTemp fails if Apply left a temporary file anywhere in the workspace.
func (f *fixture) noTemp() {
	f.t.Helper()
	filepath.WalkDir(f.ws, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".skillbox-") {
			f.t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

// within runs fn and fails the test if it takes longer than a few seconds
// (a FIFO opened for reading would block forever).
func within(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("blocked: a special file was opened in a way that blocks")
	}
}

func findings(fs []api.WorkspaceFinding) string {
	var b bytes.Buffer
	for _, f := range fs {
		b.WriteString(f.Path + ": " + f.Why + "\n")
	}
	return b.String()
}

func hasFinding(fs []api.WorkspaceFinding, path, why string) bool {
	for _, f := range fs {
		if f.Path == path && strings.Contains(f.Why, why) {
			return true
		}
	}
	return false
}
