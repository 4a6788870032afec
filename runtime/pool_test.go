package runtime

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// fakeLC is a Lifecycle whose sandboxes record what happened to them.
type fakeLC struct {
	mu        sync.Mutex
	created   int
	destroyed map[string]bool
	delivered map[string]bool
	bound     []string // skill dirs bound at claim (claimLC)
}

type fakeSB struct {
	lc   *fakeLC
	spec SandboxSpec
}

func (f *fakeLC) Name() string                                    { return "fake" }
func (f *fakeLC) Version(context.Context) (string, error)         { return "fake 1", nil }
func (f *fakeLC) Close(context.Context) error                     { return nil }
func (f *fakeLC) Run(ctx context.Context, j Job) (*Result, error) { return RunLifecycle(ctx, f, j) }
func (f *fakeLC) Create(_ context.Context, s SandboxSpec) (Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created++
	return &fakeSB{lc: f, spec: s}, nil
}

func (s *fakeSB) ID() string                  { return s.spec.ID }
func (s *fakeSB) Start(context.Context) error { return nil }
func (s *fakeSB) Deliver(context.Context, Invocation) error {
	s.lc.mu.Lock()
	defer s.lc.mu.Unlock()
	s.lc.delivered[s.spec.ID] = true
	return nil
}
func (s *fakeSB) Wait(context.Context) (*Result, error) {
	return &Result{Summary: outcome.Summary{Reason: ReasonExit, Warm: s.spec.Boot != BootCold}}, nil
}
func (s *fakeSB) Destroy(context.Context) error {
	s.lc.mu.Lock()
	defer s.lc.mu.Unlock()
	s.lc.destroyed[s.spec.ID] = true
	return nil
}

func TestPool(t *testing.T) {
	lc := &fakeLC{destroyed: map[string]bool{}, delivered: map[string]bool{}}
	p := NewPool(lc, PoolConfig{PerKey: 2, Total: 3, IdleTimeout: time.Hour}, nil)
	job := Job{Sandbox: SandboxSpec{ID: "skillbox-job", RootFS: "/r", SkillDir: "/s"}, Invocation: Invocation{Args: []string{"python3", "/skill/scripts/a.py"}}}
	key, ok := KeyFor(job, "sk", "sha256:1")
	if !ok || key.Boot != BootPython {
		t.Fatalf("KeyFor = %+v %v", key, ok)
	}
	// Nothing warm yet: cold, at once.
	res, err := p.Run(context.Background(), key, job)
	if err != nil || res.Warm {
		t.Fatalf("empty pool: %+v %v", res, err)
	}
	p.Warm(key)
	waitfor.True(t, "two idle sandboxes", 5*time.Second, func() bool { return p.Stats().Idle == 2 })
	res, err = p.Run(context.Background(), key, job)
	if err != nil || !res.Warm {
		t.Fatalf("full pool: %+v %v", res, err)
	}
	// A job asking for less memory than the pool's sandboxes goes cold.
	strict := job
	strict.Sandbox.ID = "skillbox-job-2"
	strict.Sandbox.Limits.MemoryBytes = 64 << 20
	if res, _ := p.Run(context.Background(), key, strict); res.Warm {
		t.Error("a stricter job ran in a looser sandbox")
	}
	// Another key fills the total bound, never past it.
	other := key
	other.SkillDigest = "sha256:2"
	p.Warm(other)
	waitfor.True(t, "refill", 5*time.Second, func() bool { s := p.Stats(); return s.Idle+s.Booting >= 3 })
	time.Sleep(50 * time.Millisecond) // time to overshoot, if the bound let it
	if s := p.Stats(); s.Idle+s.Booting > 3 {
		t.Errorf("over the total: %+v", s)
	}
	p.Drain(func(k PoolKey) bool { return k.SkillDigest == "sha256:1" })
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if len(lc.destroyed) != lc.created {
		t.Errorf("%d sandboxes made, %d destroyed: %v", lc.created, len(lc.destroyed), lc.destroyed)
	}
	if s := p.Stats(); s.Idle != 0 || s.Warm != 1 || s.Cold != 2 {
		t.Errorf("after Close: %+v", s)
	}
}

func TestPSSCountsAnAddressSpaceOnce(t *testing.T) {
	self := os.Getpid()
	one := PSS([]int{self})
	if one <= 0 {
		t.Fatalf("PSS of this process = %d, want > 0", one)
	}
	tests := []struct {
		name string
		pids []int
	}{
		{"the same process twice", []int{self, self}},
		{"with a pid that is gone", []int{self, 1 << 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PSS(tt.pids)
			// The test's own memory moves a little between reads.
			if got < one/2 || got > one*3/2 {
				t.Errorf("PSS(%v) = %d, want about %d (one address space)", tt.pids, got, one)
			}
		})
	}
}

func TestProcBytes(t *testing.T) {
	self := "/proc/" + strconv.Itoa(os.Getpid()) + "/status"
	tests := []struct {
		name, path, field string
		ok                bool
	}{
		{"VmRSS of this process", self, "VmRSS", true},
		{"no such line", self, "NoSuchField", false},
		{"no such file", "/proc/no-such-pid/status", "VmRSS", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := ProcBytes(tt.path, tt.field)
			if (err == nil) != tt.ok || (tt.ok && v <= 0) {
				t.Errorf("ProcBytes(%s, %s) = %d, %v", tt.path, tt.field, v, err)
			}
		})
	}
}

// claimLC is a Lifecycle whose sandboxes take their skill at claim.
type claimLC struct {
	fakeLC
	bindErr error
}

type claimSB struct {
	fakeSB
	lc *claimLC
}

func (f *claimLC) SkillAtClaim(SandboxSpec) bool { return true }
func (f *claimLC) Create(ctx context.Context, s SandboxSpec) (Sandbox, error) {
	sb, _ := f.fakeLC.Create(ctx, s)
	return &claimSB{fakeSB: *sb.(*fakeSB), lc: f}, nil
}
func (f *claimLC) Run(ctx context.Context, j Job) (*Result, error) { return RunLifecycle(ctx, f, j) }

func (s *claimSB) BindSkill(_ context.Context, dir string) error {
	if s.lc.bindErr != nil {
		return s.lc.bindErr
	}
	if s.spec.SkillDir != "" {
		return errors.New("bound twice")
	}
	s.spec.SkillDir = dir
	s.lc.mu.Lock()
	defer s.lc.mu.Unlock()
	s.lc.bound = append(s.lc.bound, dir)
	return nil
}

func TestPoolBindsSkillsAtClaim(t *testing.T) {
	lc := &claimLC{fakeLC: fakeLC{destroyed: map[string]bool{}, delivered: map[string]bool{}}}
	p := NewPool(lc, PoolConfig{PerKey: 2, Total: 4, IdleTimeout: time.Hour}, nil)
	defer p.Close(context.Background())
	job := func(skill, dir string) (PoolKey, Job) {
		j := Job{Sandbox: SandboxSpec{ID: "skillbox-" + skill, RootFS: "/r", SkillDir: dir}, Invocation: Invocation{Args: []string{"python3", "/skill/scripts/a.py"}}}
		k, _ := KeyFor(j, skill, "sha256:"+skill)
		return k, j
	}
	ka, ja := job("a", "/skills/a")
	kb, jb := job("b", "/skills/b")
	p.Warm(ka)
	p.Warm(kb) // the same sandboxes: no more booted
	waitfor.True(t, "two idle sandboxes", 5*time.Second, func() bool { return p.Stats().Idle == 2 })
	if s := p.Stats(); s.Keys != 1 {
		t.Errorf("%d keys for two skills of one image, want 1: %+v", s.Keys, s)
	}
	for _, tc := range []struct {
		key PoolKey
		job Job
	}{{ka, ja}, {kb, jb}} {
		res, err := p.Run(context.Background(), tc.key, tc.job)
		if err != nil || !res.Warm {
			t.Fatalf("skill %s: %+v %v, want a warm run", tc.key.Skill, res, err)
		}
	}
	// A skill that changed leaves the warm sandboxes be.
	p.Drain(func(k PoolKey) bool { return k.Skill == "a" })
	waitfor.True(t, "refill", 5*time.Second, func() bool { return p.Stats().Idle == 2 })
	// A bind that fails costs the sandbox, not the run.
	lc.bindErr = errors.New("agent gone")
	res, err := p.Run(context.Background(), ka, ja)
	if err != nil || res.Warm {
		t.Fatalf("failed bind: %+v %v, want a cold run", res, err)
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if !slices.Equal(lc.bound, []string{"/skills/a", "/skills/b"}) {
		t.Errorf("bound %v, want each skill's dir once", lc.bound)
	}
}
