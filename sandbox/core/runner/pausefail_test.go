package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/checkpoint"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// fakeCheckpointed is a session sandbox that can be frozen and
// checkpointed, failing where a test says; it records what was done.
type fakeCheckpointed struct {
	id             string
	done           chan struct{}
	failCheckpoint error // returned by Checkpoint, after it wrote a part
	failThaw       bool  // Thaw fails, and the sandbox goes
	reserve        int64 // Freeze reserves it (what /work would take)
	charge         int64 // Checkpoint charges it (a write of the copy)
	mu             sync.Mutex
	calls          []string
	once           sync.Once
}

func newFakeCheckpointed(id string) *fakeCheckpointed {
	return &fakeCheckpointed{id: id, done: make(chan struct{})}
}

func (f *fakeCheckpointed) call(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeCheckpointed) Calls() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, " ")
}

func (f *fakeCheckpointed) ID() string { return f.id }
func (f *fakeCheckpointed) Run(context.Context, string, runtime.Invocation) (*runtime.Result, error) {
	return &runtime.Result{}, nil
}
func (f *fakeCheckpointed) Background(context.Context, string, runtime.Invocation) (runtime.BackgroundRun, error) {
	return runtime.BackgroundRun{}, nil
}
func (f *fakeCheckpointed) Signal(context.Context, string, syscall.Signal) error  { return nil }
func (f *fakeCheckpointed) Runs(context.Context) ([]runtime.BackgroundRun, error) { return nil, nil }
func (f *fakeCheckpointed) Workdir() string                                       { return "" }
func (f *fakeCheckpointed) Done() <-chan struct{}                                 { return f.done }
func (f *fakeCheckpointed) Destroy(context.Context) error {
	f.call("destroy")
	f.once.Do(func() { close(f.done) })
	return nil
}
func (f *fakeCheckpointed) Identity(context.Context) (runtime.SandboxIdentity, error) {
	return runtime.SandboxIdentity{RuntimeVersion: "runsc version test", Platform: "systrap", Network: "none", SpecDigest: "sha256:" + strings.Repeat("a", 64)}, nil
}
func (f *fakeCheckpointed) Checkpoint(_ context.Context, imageDir, workDir string, leaveRunning bool, budget runtime.CheckpointBudget) error {
	f.call("checkpoint(leave=" + map[bool]string{true: "true", false: "false"}[leaveRunning] + ")")
	if err := budget.Charge(f.charge); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(imageDir, checkpoint.RunscImageFile), []byte("image"), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(workDir, "part"), []byte("half of /work"), 0o600); err != nil {
		return err
	}
	return f.failCheckpoint
}
func (f *fakeCheckpointed) Freeze(_ context.Context, budget runtime.CheckpointBudget) error {
	if err := budget.Reserve(f.reserve); err != nil {
		return err
	}
	f.call("freeze")
	return nil
}
func (f *fakeCheckpointed) Thaw(ctx context.Context) error {
	f.call("thaw")
	if f.failThaw {
		_ = f.Destroy(ctx)
		return errors.New("resume failed")
	}
	return nil
}

type fakeSessionBackend struct{}

func (fakeSessionBackend) CreateSession(context.Context, runtime.SandboxSpec) (runtime.SessionSandbox, error) {
	return nil, errors.New("no sandboxes here")
}

// recorded keeps what a SessionSandboxes audits.
type recorded struct {
	mu   sync.Mutex
	recs []*audit.Record
}

func (r *recorded) Record(_ context.Context, rec *audit.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	return nil
}
func (r *recorded) Check() error                    { return nil }
func (r *recorded) Enabled() bool                   { return true }
func (r *recorded) FreeBytes() (int64, bool, error) { return 0, false, nil }

func (r *recorded) find(event, outcome string) *audit.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Event == event && rec.Outcome == outcome {
			return rec
		}
	}
	return nil
}

// TestFailedCheckpointCleansUp: a pause or fork whose checkpoint fails
// leaves nothing in the store and the sandbox either thawed, running as
// before, or (when it cannot be thawed) destroyed with its skills dir,
// the box gone and the session's next run told why; both audited.
func TestFailedCheckpointCleansUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fork     bool
		failThaw bool
		budget   int64 // the store's; the checkpoint itself then succeeds
		reserve  int64 // what Freeze reserves for /work
		charge   int64 // what the copy charges
		left     string
		calls    string
	}{
		{"pause, thawed", false, false, 0, 0, 0, leftRunning, "freeze checkpoint(leave=true) thaw"},
		{"pause, not thawed", false, true, 0, 0, 0, leftClosed, "freeze checkpoint(leave=true) thaw destroy destroy"},
		{"pause over the store's budget", false, false, 1, 0, 0, leftRunning, "freeze checkpoint(leave=true) thaw"},
		{"pause whose /work cannot be reserved", false, false, 1 << 20, 2 << 20, 0, leftRunning, ""},
		{"pause whose copy passes the budget", false, false, 1 << 20, 1 << 10, 2 << 20, leftRunning, "freeze checkpoint(leave=true) thaw"},
		{"fork, thawed", true, false, 0, 0, 0, leftRunning, "freeze checkpoint(leave=true) thaw"},
		{"fork, not thawed", true, true, 0, 0, 0, leftClosed, "freeze checkpoint(leave=true) thaw destroy destroy"},
		{"fork over the store's budget", true, false, 1, 0, 0, leftRunning, "freeze checkpoint(leave=true) thaw"},
		{"fork whose /work cannot be reserved", true, false, 1 << 20, 2 << 20, 0, leftRunning, ""},
		{"fork whose copy passes the budget", true, false, 1 << 20, 1 << 10, 2 << 20, leftRunning, "freeze checkpoint(leave=true) thaw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorded{}
			store := filepath.Join(t.TempDir(), "checkpoints")
			o := SessionOptions{Backend: fakeSessionBackend{}, Dir: t.TempDir(), Supervisor: "/nonexistent/skillbox", Checkpoints: store}
			o.Config.CheckpointBudget = tc.budget
			m := NewSessionSandboxes(o, rec, nil)
			b := pausedBox(t, m)
			sb := newFakeCheckpointed(b.id)
			sb.failThaw, sb.reserve, sb.charge = tc.failThaw, tc.reserve, tc.charge
			want := "budget"
			if tc.budget == 0 {
				sb.failCheckpoint, want = errors.New("copy /work: no space left on device"), "no space left"
			}
			b.sb = sb
			m.boxes[b.key] = b
			var err error
			what := "pause"
			if tc.fork {
				what = "fork"
				_, err = m.Fork(context.Background(), "ses_1", "ses_2")
			} else {
				_, err = m.Pause(context.Background(), "ses_1")
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %v, want the checkpoint's error", what, err)
			}
			if want == "budget" && !errors.Is(err, api.ErrLimitExceeded) {
				t.Errorf("%s refused by a budget: %v, want limit_exceeded", what, err)
			}
			if got := sb.Calls(); got != tc.calls {
				t.Errorf("the sandbox saw %q, want %q", got, tc.calls)
			}
			if ents, _ := os.ReadDir(store); len(ents) != 0 {
				t.Errorf("the failed %s left %v in the store", what, ents)
			}
			event := audit.EventSessionCheckpoint
			if tc.fork {
				event = audit.EventSessionFork
			}
			if r := rec.find(event, audit.OutcomeError); r == nil || r.Detail["left"] != tc.left || !strings.Contains(r.Error, want) {
				t.Errorf("audit of the failed %s: %+v, want left=%s", what, r, tc.left)
			}
			_, live := m.boxes[b.key]
			_, serr := os.Stat(b.skillsDir)
			_, berr := m.box(context.Background(), b.key, nil, runtime.ImageRef{}, "", "", runtime.Limits{})
			if tc.left == leftRunning {
				if !live || b.sb != sb || serr != nil {
					t.Errorf("the sandbox does not run on after the failed %s: box kept %v, skills dir %v", what, live, serr)
				}
				if berr != nil {
					t.Errorf("the next run after a failed %s that left the sandbox running: %v", what, berr)
				}
				return
			}
			if live || b.sb != nil || !os.IsNotExist(serr) {
				t.Errorf("after the failed %s took the sandbox down: box kept %v, skills dir %v", what, live, serr)
			}
			if r := rec.find(audit.EventSessionSandbox, "destroyed"); r == nil || r.Detail["sandbox"] != b.id {
				t.Errorf("the sandbox's end is not audited: %+v", r)
			}
			if berr == nil || !strings.Contains(berr.Error(), b.id) || !strings.Contains(berr.Error(), "its "+what+" failed") {
				t.Errorf("the next run is not told why the sandbox went: %v", berr)
			}
			if _, again := m.box(context.Background(), b.key, nil, runtime.ImageRef{}, "", "", runtime.Limits{}); again != nil && strings.Contains(again.Error(), "its "+what+" failed") {
				t.Errorf("the reason is given twice: %v", again)
			}
		})
	}
}
