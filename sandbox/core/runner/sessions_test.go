package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/oci"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/skills"
)

// fakeSessionSandbox is a runtime.SessionSandbox whose methods are what
// its function fields say (nil: a zero answer).
type fakeSessionSandbox struct {
	id         string
	workdir    string
	done       chan struct{}
	run        func(ctx context.Context, runID string, inv runtime.Invocation) (*runtime.Result, error)
	background func(ctx context.Context, runID string, inv runtime.Invocation) (runtime.BackgroundRun, error)
	signal     func(ctx context.Context, runID string, sig syscall.Signal) error
	runs       func(ctx context.Context) ([]runtime.BackgroundRun, error)
	destroy    func(ctx context.Context) error
}

var _ runtime.SessionSandbox = (*fakeSessionSandbox)(nil)

func (f *fakeSessionSandbox) ID() string { return f.id }

func (f *fakeSessionSandbox) Run(ctx context.Context, runID string, inv runtime.Invocation) (*runtime.Result, error) {
	if f.run == nil {
		return &runtime.Result{}, nil
	}
	return f.run(ctx, runID, inv)
}

func (f *fakeSessionSandbox) Background(ctx context.Context, runID string, inv runtime.Invocation) (runtime.BackgroundRun, error) {
	if f.background == nil {
		return runtime.BackgroundRun{ID: runID, Running: true}, nil
	}
	return f.background(ctx, runID, inv)
}

func (f *fakeSessionSandbox) Signal(ctx context.Context, runID string, sig syscall.Signal) error {
	if f.signal == nil {
		return nil
	}
	return f.signal(ctx, runID, sig)
}

func (f *fakeSessionSandbox) Runs(ctx context.Context) ([]runtime.BackgroundRun, error) {
	if f.runs == nil {
		return nil, nil
	}
	return f.runs(ctx)
}

func (f *fakeSessionSandbox) Workdir() string { return f.workdir }

func (f *fakeSessionSandbox) Done() <-chan struct{} {
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

func (f *fakeSessionSandbox) Destroy(ctx context.Context) error {
	if f.destroy == nil {
		return nil
	}
	return f.destroy(ctx)
}

// testBox is a box whose skills dir is a fresh temp dir laid out as a
// session sandbox's.
func testBox(t *testing.T, m *SessionSandboxes, session string) *sessionBox {
	t.Helper()
	b := &sessionBox{key: boxKey{session: session, image: "python"}, id: newBoxID(), ready: make(chan struct{}), skills: map[string]placedSkill{}}
	b.skillsDir = filepath.Join(m.o.Dir, b.id)
	if err := oci.MakeSessionSkillsDir(b.skillsDir); err != nil {
		t.Fatal(err)
	}
	close(b.ready)
	return b
}

func newTestSessions(t *testing.T) *SessionSandboxes {
	t.Helper()
	return NewSessionSandboxes(SessionOptions{Dir: t.TempDir(), Supervisor: "/nonexistent/skillbox"}, nil, nil)
}

// makeTree writes files (content by path; a trailing "/" makes a dir).
func makeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if strings.HasSuffix(rel, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSessionJobSkillPaths(t *testing.T) {
	m := newTestSessions(t)
	b := testBox(t, m, "ses_1")
	skillRoot := t.TempDir()
	makeTree(t, skillRoot, map[string]string{"SKILL.md": "---\nname: pdf\n---\n", "scripts/run.py": "print(1)"})
	layers := filepath.Join(t.TempDir(), "layers")
	deps := filepath.Join(layers, "sha256-abc", "tree")
	p := &Plan{runID: "run_1", request: RunRequest{Skill: &skills.Skill{Name: "pdf", Digest: "sha256:11"}}, origin: Origin{SessionID: "ses_1"}}
	stdin := []byte("in")
	job := runtime.Job{
		Sandbox: runtime.SandboxSpec{
			SkillDir: skillRoot,
			DepsDir:  deps,
		},
		Invocation: runtime.Invocation{
			Args: []string{"python3", "/skill/scripts/run.py", "/skill", "/skillx", "--in=/skill/x", "/opt", "/opt/python/m", "/optional"},
			Env:  []string{"A=/skill"},
			ModuleEnv: []string{
				"PYTHONPATH=/skill:/skill/scripts:/opt/python",
				"NODE_PATH=/opt/node_modules",
				"EMPTY=",
				"NOCOLON=/skill/lib",
			},
			Stdin:  stdin,
			Files:  []runtime.InputFile{{Name: "a.txt", Data: []byte("a")}},
			Limits: runtime.Limits{Timeout: time.Second},
		},
	}
	inv, err := m.sessionJob(b, p, job, layers)
	if err != nil {
		t.Fatal(err)
	}
	wantArgs := []string{"python3", "/skills/pdf/scripts/run.py", "/skills/pdf", "/skillx", "--in=/skill/x",
		"/skills/.layers/sha256-abc/tree", "/skills/.layers/sha256-abc/tree/python/m", "/optional"}
	if !slices.Equal(inv.Args, wantArgs) {
		t.Errorf("args\n %q\nwant\n %q", inv.Args, wantArgs)
	}
	wantEnv := []string{
		"PYTHONPATH=/skills/pdf:/skills/pdf/scripts:/skills/.layers/sha256-abc/tree/python",
		"NODE_PATH=/skills/.layers/sha256-abc/tree/node_modules",
		"EMPTY=",
		"NOCOLON=/skills/pdf/lib",
	}
	if !slices.Equal(inv.ModuleEnv, wantEnv) {
		t.Errorf("module env\n %q\nwant\n %q", inv.ModuleEnv, wantEnv)
	}
	// Env is the caller's and is not rewritten; the rest passes through.
	if !slices.Equal(inv.Env, job.Invocation.Env) || string(inv.Stdin) != "in" || len(inv.Files) != 1 || inv.Limits.Timeout != time.Second {
		t.Errorf("invocation lost the job's env, stdin, files or limits: %+v", inv)
	}
	if got, err := os.ReadFile(filepath.Join(b.skillsDir, "pdf", "scripts", "run.py")); err != nil || string(got) != "print(1)" {
		t.Errorf("the skill was not placed at its path: %q, %v", got, err)
	}
	if ps := b.skills["pdf"]; ps.root != skillRoot || ps.digest != "sha256:11" {
		t.Errorf("placed skill %+v", ps)
	}
	if !slices.Equal(job.Invocation.Args[:2], []string{"python3", "/skill/scripts/run.py"}) || job.Invocation.ModuleEnv[0] != "PYTHONPATH=/skill:/skill/scripts:/opt/python" {
		t.Error("sessionJob changed the job's own slices")
	}

	// The same version again is not copied again; a new one is swapped in.
	if err := os.WriteFile(filepath.Join(b.skillsDir, "pdf", "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.sessionJob(b, p, job, layers); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.skillsDir, "pdf", "marker")); err != nil {
		t.Error("the same skill version was copied again")
	}
	v2 := t.TempDir()
	makeTree(t, v2, map[string]string{"scripts/run.py": "print(2)"})
	job.Sandbox.SkillDir = v2
	if _, err := m.sessionJob(b, p, job, layers); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.skillsDir, "pdf", "scripts", "run.py")); string(got) != "print(2)" {
		t.Errorf("the new version was not placed: %q", got)
	}
	if _, err := os.Stat(filepath.Join(b.skillsDir, "pdf", "marker")); err == nil {
		t.Error("the old version's files are left in the new one")
	}
	if ents, _ := filepath.Glob(filepath.Join(b.skillsDir, ".new-*")); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

func TestSessionJobNoDeps(t *testing.T) {
	m := newTestSessions(t)
	b := testBox(t, m, "ses_1")
	root := t.TempDir()
	p := &Plan{runID: "run_1", request: RunRequest{Skill: &skills.Skill{Name: "s"}}}
	inv, err := m.sessionJob(b, p, runtime.Job{Sandbox: runtime.SandboxSpec{SkillDir: root}, Invocation: runtime.Invocation{Args: []string{"/skill/a", "/opt/x"}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Without a dependency layer /opt is the image's and stays.
	if !slices.Equal(inv.Args, []string{"/skills/s/a", "/opt/x"}) {
		t.Errorf("args %q", inv.Args)
	}
}

func TestSessionJobDepsOutsideLayers(t *testing.T) {
	m := newTestSessions(t)
	b := testBox(t, m, "ses_1")
	layers := t.TempDir()
	for _, deps := range []string{filepath.Join(t.TempDir(), "sha256-abc", "tree"), filepath.Dir(layers)} {
		p := &Plan{runID: "run_1", request: RunRequest{Skill: &skills.Skill{Name: "s"}}}
		_, err := m.sessionJob(b, p, runtime.Job{Sandbox: runtime.SandboxSpec{SkillDir: t.TempDir(), DepsDir: deps}}, layers)
		if !errors.Is(err, api.ErrInternal) {
			t.Errorf("deps %s outside %s: %v, want an internal error", deps, layers, err)
		}
	}
}

func TestSessionJobRunCode(t *testing.T) {
	m := newTestSessions(t)
	b := testBox(t, m, "ses_1")
	a, c := t.TempDir(), t.TempDir()
	makeTree(t, a, map[string]string{"lib/a.py": "A"})
	makeTree(t, c, map[string]string{"c.py": "C"})
	prog := &runtime.Program{Name: "main.py", Data: []byte("import a")}
	p := &Plan{runID: "run_42", origin: Origin{SessionID: "ses_1"}, code: &CodePlan{Mounts: []SkillMountPlan{
		{Skill: &skills.Skill{Name: "alpha", Digest: "sha256:aa"}, Root: a, Path: runtime.SkillTarget("alpha")},
		{Skill: &skills.Skill{Name: "charlie", Digest: "sha256:cc"}, Root: c, Path: runtime.SkillTarget("charlie")},
	}}}
	job := runtime.Job{
		Sandbox:    runtime.SandboxSpec{Program: prog},
		Invocation: runtime.Invocation{Args: []string{"python3", prog.Path(), "/skill"}, ModuleEnv: []string{"PYTHONPATH=/skills/alpha:/skills/charlie:" + prog.Path()}},
	}
	inv, err := m.sessionJob(b, p, job, "")
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.ProgramDir + "/run_42/main.py"
	// A code run has no /skill: it is left alone.
	if !slices.Equal(inv.Args, []string{"python3", want, "/skill"}) {
		t.Errorf("args %q", inv.Args)
	}
	if got := inv.ModuleEnv[0]; got != "PYTHONPATH=/skills/alpha:/skills/charlie:"+want {
		t.Errorf("module env %q", got)
	}
	f := filepath.Join(b.skillsDir, ".code", "run_42", "main.py")
	st, err := os.Stat(f)
	if err != nil || st.Mode() != 0o644 {
		t.Fatalf("program %s: %v %v, want 0644", f, st, err)
	}
	if st, _ := os.Stat(filepath.Dir(f)); st == nil || st.Mode() != os.ModeDir|0o755 {
		t.Errorf("program dir mode %v, want 0755", st.Mode())
	}
	if got, _ := os.ReadFile(f); string(got) != "import a" {
		t.Errorf("program holds %q", got)
	}
	for name, file := range map[string]string{"alpha": "lib/a.py", "charlie": "c.py"} {
		if _, err := os.Stat(filepath.Join(b.skillsDir, name, file)); err != nil {
			t.Errorf("skill %s not placed: %v", name, err)
		}
		if b.skills[name].digest == "" {
			t.Errorf("skill %s not recorded", name)
		}
	}
	// The same run id again is refused, not written over.
	if _, err := m.sessionJob(b, p, job, ""); err == nil {
		t.Error("a second program under the same run id was written")
	}
}

func TestCopySkillTree(t *testing.T) {
	src, outside := t.TempDir(), t.TempDir()
	dst := filepath.Join(t.TempDir(), "copy")
	for _, e := range []struct {
		rel  string
		mode os.FileMode
	}{{"private.txt", 0o600}, {"run.sh", 0o700}, {"group-exec", 0o610}, {"other-exec", 0o601}, {"sub/deep/x.py", 0o640}} {
		p := filepath.Join(src, e.rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(e.rel), e.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, e.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	makeTree(t, outside, map[string]string{"secret": "SECRET"})
	for name, target := range map[string]string{"abs-link": filepath.Join(outside, "secret"), "dir-link": outside, "rel-link": "run.sh", "dangling": "nowhere"} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := copySkillTree(src, dst); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]os.FileMode{
		".":             os.ModeDir | 0o755,
		"private.txt":   0o644,
		"run.sh":        0o755,
		"group-exec":    0o755,
		"other-exec":    0o755,
		"sub":           os.ModeDir | 0o755,
		"sub/deep":      os.ModeDir | 0o755,
		"sub/deep/x.py": 0o644,
	} {
		st, err := os.Lstat(filepath.Join(dst, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", rel, st.Mode(), want)
		}
		if want.IsRegular() {
			if got, _ := os.ReadFile(filepath.Join(dst, rel)); string(got) != rel {
				t.Errorf("%s holds %q", rel, got)
			}
		}
	}
	for name, target := range map[string]string{"abs-link": filepath.Join(outside, "secret"), "dir-link": outside, "rel-link": "run.sh", "dangling": "nowhere"} {
		st, err := os.Lstat(filepath.Join(dst, name))
		if err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is not a link in the copy: %v %v", name, st, err)
			continue
		}
		if got, _ := os.Readlink(filepath.Join(dst, name)); got != target {
			t.Errorf("%s -> %q, want %q", name, got, target)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !os.IsNotExist(err) {
		t.Errorf("a fifo was copied: %v", err)
	}
	// Nothing behind a link was copied.
	_ = filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), "SECRET") {
				t.Errorf("%s: a link was followed", p)
			}
		}
		return nil
	})
	// dst must not exist yet: a copy never merges into an old tree.
	if err := copySkillTree(src, dst); err == nil {
		t.Error("copied into an existing tree")
	}
}

// logRun registers a background run of session in a box whose sandbox's
// workdir is returned.
func logRun(t *testing.T, m *SessionSandboxes, session, runID string) (workdir string, box *sessionBox) {
	t.Helper()
	wd := t.TempDir()
	b := testBox(t, m, session)
	b.sb = &fakeSessionSandbox{id: b.id, workdir: wd}
	m.runs[runKey{session, runID}] = &backgroundRun{session: session, box: b, plan: &Plan{runID: runID, script: "scripts/s.py"}, done: make(chan struct{})}
	return wd, b
}

func logPath(wd, runID string) string {
	return filepath.Join(wd, strings.TrimPrefix(runtime.SessionRunsDir, runtime.WorkDir+"/"), runID+".log")
}

func TestLogsByOffset(t *testing.T) {
	m := newTestSessions(t)
	wd, _ := logRun(t, m, "ses_1", "run_1")
	const content = "0123456789abcdef"
	makeTree(t, wd, map[string]string{strings.TrimPrefix(logPath(wd, "run_1"), wd+"/"): content})
	for _, tc := range []struct {
		name      string
		offset, n int64
		want      string
	}{
		{"all", 0, 0, content},
		{"a slice", 3, 4, "3456"},
		{"to the end", 10, 100, "abcdef"},
		{"the last byte", 15, 1, "f"},
		{"at the end", 16, 0, ""},
		{"past the end", 1000, 5, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, size, err := m.Logs("ses_1", "run_1", tc.offset, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tc.want || size != int64(len(content)) {
				t.Errorf("read %q (size %d), want %q (size %d)", data, size, tc.want, len(content))
			}
		})
	}
	for _, tc := range []struct {
		name      string
		offset, n int64
	}{{"negative offset", -1, 0}, {"negative length", 0, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := m.Logs("ses_1", "run_1", tc.offset, tc.n); !errors.Is(err, api.ErrInvalidParams) {
				t.Errorf("%v, want invalid params", err)
			}
		})
	}
}

func TestLogsCap(t *testing.T) {
	m := newTestSessions(t)
	wd, _ := logRun(t, m, "ses_1", "run_1")
	big := strings.Repeat("x", maxLogRead+10)
	makeTree(t, wd, map[string]string{strings.TrimPrefix(logPath(wd, "run_1"), wd+"/"): big})
	for _, n := range []int64{0, maxLogRead + 1, 1 << 40} {
		data, size, err := m.Logs("ses_1", "run_1", 0, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != maxLogRead || size != int64(len(big)) {
			t.Errorf("length %d: read %d bytes of %d, want %d", n, len(data), size, maxLogRead)
		}
	}
	if data, _, _ := m.Logs("ses_1", "run_1", maxLogRead, 0); len(data) != 10 {
		t.Errorf("the rest is %d bytes, want 10", len(data))
	}
}

// TestLogsRefused: the log is in the sandbox's /work, which the sandbox
// may have changed: a link or a fifo in its place is refused (never
// followed, never waited on).
func TestLogsRefused(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, wd, log string)
		kind  error
	}{
		{"log is a link", func(t *testing.T, wd, log string) {
			mustMkdirAll(t, filepath.Dir(log))
			if err := os.Symlink(outside, log); err != nil {
				t.Fatal(err)
			}
		}, api.ErrUnavailable},
		{"runs dir is a link", func(t *testing.T, wd, log string) {
			mustMkdirAll(t, filepath.Dir(filepath.Dir(log)))
			other := t.TempDir()
			if err := os.WriteFile(filepath.Join(other, filepath.Base(log)), []byte("SECRET"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, filepath.Dir(log)); err != nil {
				t.Fatal(err)
			}
		}, api.ErrUnavailable},
		{"state dir is a link", func(t *testing.T, wd, log string) {
			other := t.TempDir()
			makeTree(t, other, map[string]string{"runs/" + filepath.Base(log): "SECRET"})
			if err := os.Symlink(other, filepath.Join(wd, ".skillbox")); err != nil {
				t.Fatal(err)
			}
		}, api.ErrUnavailable},
		{"log is a fifo", func(t *testing.T, wd, log string) {
			mustMkdirAll(t, filepath.Dir(log))
			if err := syscall.Mkfifo(log, 0o644); err != nil {
				t.Fatal(err)
			}
		}, api.ErrUnavailable},
		{"log is a dir", func(t *testing.T, wd, log string) { mustMkdirAll(t, log) }, api.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestSessions(t)
			wd, _ := logRun(t, m, "ses_1", "run_1")
			tc.plant(t, wd, logPath(wd, "run_1"))
			done := make(chan struct{})
			var (
				data []byte
				err  error
			)
			go func() {
				defer close(done)
				data, _, err = m.Logs("ses_1", "run_1", 0, 0)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Logs hangs")
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("err %v, want %v", err, tc.kind)
			}
			if strings.Contains(string(data), "SECRET") {
				t.Error("read through a link")
			}
		})
	}
}

func mustMkdirAll(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestLogsLookup(t *testing.T) {
	m := newTestSessions(t)
	wd, b := logRun(t, m, "ses_1", "run_1")
	// Nothing written yet: nothing to read, no error.
	if data, size, err := m.Logs("ses_1", "run_1", 0, 0); err != nil || len(data) != 0 || size != 0 {
		t.Errorf("no log yet: %q %d %v", data, size, err)
	}
	for _, tc := range []struct{ session, run string }{{"ses_2", "run_1"}, {"ses_1", "run_2"}, {"", "run_1"}} {
		if _, _, err := m.Logs(tc.session, tc.run, 0, 0); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("session %q run %q: %v, want not found", tc.session, tc.run, err)
		}
	}
	var none *SessionSandboxes
	if _, _, err := none.Logs("ses_1", "run_1", 0, 0); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("no keeper: %v, want not found", err)
	}
	// Its sandbox's workdir is gone.
	b.sb = &fakeSessionSandbox{workdir: filepath.Join(wd, "gone")}
	if _, _, err := m.Logs("ses_1", "run_1", 0, 0); !errors.Is(err, api.ErrUnavailable) {
		t.Errorf("gone workdir: %v, want unavailable", err)
	}
	// A paused sandbox: resume first.
	b.sb = nil
	_, _, err := m.Logs("ses_1", "run_1", 0, 0)
	if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "sessions.resume") {
		t.Errorf("paused: %v, want unavailable naming sessions.resume", err)
	}
}

// fakeBackend makes fake session sandboxes and remembers their specs.
type fakeBackend struct {
	mu     sync.Mutex
	specs  []runtime.SandboxSpec
	boxes  []*fakeSessionSandbox
	make   func(spec runtime.SandboxSpec) *fakeSessionSandbox
	signal []syscall.Signal
}

var _ runtime.SessionBackend = (*fakeBackend)(nil)

func (f *fakeBackend) CreateSession(ctx context.Context, spec runtime.SandboxSpec) (runtime.SessionSandbox, error) {
	sb := &fakeSessionSandbox{id: spec.ID, workdir: "/nonexistent", done: make(chan struct{})}
	if f.make != nil {
		sb = f.make(spec)
	}
	sb.signal = func(ctx context.Context, runID string, sig syscall.Signal) error {
		f.mu.Lock()
		f.signal = append(f.signal, sig)
		f.mu.Unlock()
		return nil
	}
	f.mu.Lock()
	f.specs = append(f.specs, spec)
	f.boxes = append(f.boxes, sb)
	f.mu.Unlock()
	return sb, nil
}

// memAudit keeps the records it is given.
type memAudit struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (a *memAudit) Append(_ context.Context, r *audit.Record) error {
	a.mu.Lock()
	a.recs = append(a.recs, *r)
	a.mu.Unlock()
	return nil
}

func (a *memAudit) Healthy() error { return nil }

func (a *memAudit) events(ev string) []audit.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []audit.Record
	for _, r := range a.recs {
		if r.Event == ev {
			out = append(out, r)
		}
	}
	return out
}

func backgroundPlan(t *testing.T, session, runID string) (*Plan, runtime.Job, *audit.Record) {
	t.Helper()
	p := &Plan{runID: runID, script: "scripts/serve.py", request: RunRequest{Skill: &skills.Skill{Name: "web", Digest: "sha256:w"}}, origin: Origin{SessionID: session}}
	job := runtime.Job{
		Sandbox:    runtime.SandboxSpec{Image: runtime.ImageRef{Name: "python", Digest: "sha256:img"}, RootFS: "/var/lib/fake/python", SkillDir: t.TempDir()},
		Invocation: runtime.Invocation{Args: []string{"python3", "/skill/scripts/serve.py"}},
	}
	start := &audit.Record{Event: audit.EventRunStart, SessionID: session, Run: &audit.RunInfo{RunID: runID, Started: time.Now().UTC()}}
	return p, job, start
}

// TestBackgroundRunLifecycle follows background runs through a fake
// backend: started in the session's one sandbox, listed, signalled,
// ended once (one run.end), and ended with their session.
func TestBackgroundRunLifecycle(t *testing.T) {
	ctx := context.Background()
	be := &fakeBackend{}
	rec := &memAudit{}
	cfg := policy.SessionConfig{BackgroundRuns: 2}
	m := NewSessionSandboxes(SessionOptions{Backend: be, Dir: filepath.Join(t.TempDir(), "sessions"), Supervisor: "/nonexistent/skillbox", Config: cfg},
		audit.NewJournal(rec, nil), nil)
	var boxID string
	for i, id := range []string{"run_1", "run_2"} {
		p, job, start := backgroundPlan(t, "ses_1", id)
		run, box, err := m.startBackground(ctx, p, job, start)
		if err != nil {
			t.Fatal(err)
		}
		if run.ID != id || !run.Running || box == "" {
			t.Errorf("started %+v in %q", run, box)
		}
		if i == 0 {
			boxID = box
		} else if box != boxID {
			t.Errorf("a second run of the session got sandbox %s, not %s", box, boxID)
		}
	}
	if len(be.specs) != 1 {
		t.Fatalf("%d sandboxes booted for one session and image", len(be.specs))
	}
	if sp := be.specs[0]; sp.Boot != runtime.BootSession || sp.Session == nil || sp.OnBackgroundExit == nil || sp.ID != boxID {
		t.Errorf("spec %+v", sp)
	}
	// The session's limit of live background runs.
	p, job, start := backgroundPlan(t, "ses_1", "run_3")
	if _, _, err := m.startBackground(ctx, p, job, start); !errors.Is(err, api.ErrLimitExceeded) {
		t.Errorf("a third background run: %v, want limit exceeded", err)
	}
	// A run with network cannot go to a session sandbox.
	p, job, _ = backgroundPlan(t, "ses_1", "run_4")
	job.Sandbox.Network = true
	if _, _, err := m.run(ctx, p, job); !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), `isolation = "run"`) {
		t.Errorf("a run with network: %v", err)
	}
	list := m.Background("ses_1")
	if len(list) != 2 || list[0].SessionID != "ses_1" || list[0].Sandbox != boxID || list[0].Skill != "web" || list[0].Script != "scripts/serve.py" {
		t.Errorf("listed %+v", list)
	}
	if len(m.Background("ses_2")) != 0 {
		t.Error("another session lists this one's runs")
	}
	if _, err := m.Signal(ctx, "ses_2", "run_1", syscall.SIGTERM); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("signal from another session: %v, want not found", err)
	}
	if _, err := m.Signal(ctx, "ses_1", "run_1", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(be.signal, []syscall.Signal{syscall.SIGTERM}) {
		t.Errorf("signals sent %v", be.signal)
	}
	// The sandbox reports run_1's end, twice: one run.end.
	hook := be.specs[0].OnBackgroundExit
	ended := runtime.BackgroundRun{ID: "run_1", ExitCode: 143, Signal: "SIGTERM"}
	hook(ended)
	hook(ended)
	hook(runtime.BackgroundRun{ID: "run_unknown"})
	ends := rec.events(audit.EventRunEnd)
	if len(ends) != 1 || ends[0].Run.RunID != "run_1" || ends[0].Outcome != string(runtime.ReasonKilled) ||
		ends[0].Run.ExitCode == nil || *ends[0].Run.ExitCode != 143 || ends[0].Run.Signal != "SIGTERM" {
		t.Fatalf("run.end records %+v", ends)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := m.Wait(wctx, "ses_1", "run_1")
	if err != nil || r.Running || r.ExitCode != 143 {
		t.Errorf("wait: %+v %v", r, err)
	}
	if wctx.Err() != nil {
		t.Error("Wait of an ended run waited for its ctx")
	}
	// Closing the session destroys its sandbox and ends run_2.
	destroyed := false
	be.boxes[0].destroy = func(context.Context) error { destroyed = true; return nil }
	m.CloseSession(ctx, "ses_1", "session closed")
	if !destroyed {
		t.Error("the session's sandbox was not destroyed")
	}
	ends = rec.events(audit.EventRunEnd)
	if len(ends) != 2 || ends[1].Run.RunID != "run_2" || ends[1].Detail["ended_by"] != "session closed" || ends[1].Run.Signal != "SIGKILL" {
		t.Errorf("run.end records after close %+v", ends)
	}
	if len(m.Background("ses_1")) != 0 {
		t.Error("a closed session still lists runs")
	}
	var destroyedRecs int
	for _, r := range rec.events(audit.EventSessionSandbox) {
		if r.Outcome == "destroyed" && r.Detail["sandbox"] == boxID {
			destroyedRecs++
		}
	}
	if destroyedRecs != 1 {
		t.Errorf("%d session.sandbox destroyed records for %s", destroyedRecs, boxID)
	}
	if _, err := os.Stat(filepath.Join(m.o.Dir, boxID)); !os.IsNotExist(err) {
		t.Errorf("the sandbox's skills dir is left: %v", err)
	}
}

// TestSessionBoxReboot: a sandbox whose supervisor died is replaced by a
// new one at the session's next run; a session without a backend is
// refused saying what to do.
func TestSessionBoxReboot(t *testing.T) {
	ctx := context.Background()
	be := &fakeBackend{}
	m := NewSessionSandboxes(SessionOptions{Backend: be, Dir: filepath.Join(t.TempDir(), "sessions"), Supervisor: "/nonexistent/skillbox"}, nil, nil)
	p, job, _ := backgroundPlan(t, "ses_1", "run_1")
	_, first, err := m.run(ctx, p, job)
	if err != nil {
		t.Fatal(err)
	}
	close(be.boxes[0].done)
	p, job, _ = backgroundPlan(t, "ses_1", "run_2")
	_, second, err := m.run(ctx, p, job)
	if err != nil {
		t.Fatal(err)
	}
	if len(be.specs) != 2 || second == first {
		t.Errorf("after its supervisor died: %d sandboxes, run in %s (first %s)", len(be.specs), second, first)
	}

	none := NewSessionSandboxes(SessionOptions{Dir: t.TempDir(), Supervisor: "/x"}, nil, nil)
	if _, _, err := none.run(ctx, p, job); !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "runsc") {
		t.Errorf("no backend: %v", err)
	}
}
