package runtimetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// Mode is how Table runs a case's job.
type Mode string

const (
	// Cold: Runtime.Run, a sandbox made for the job.
	Cold Mode = "cold"
	// Warm: the lifecycle as the pool drives it (RunWarm): the sandbox
	// is booted first, and only then given the job.
	Warm Mode = "warm"
)

// Table runs the cases on one backend.
type Table struct {
	Runtime runtime.Runtime
	// Env is every case's CaseEnv but its Marker, made per case.
	Env CaseEnv
	// RootFS and Image are what every job runs in (see runtime.Job).
	RootFS string
	Image  runtime.ImageRef
	// NewID makes a run id.
	NewID func() string
	// NotApplicable names the cases that cannot apply to the backend,
	// with why; the table skips them saying so.
	NotApplicable map[string]string
	// After checks what a run left once its case ended (nil: nothing).
	After func(t *testing.T, job runtime.Job)
}

// Run runs every case in each mode, as subtests mode/case.
func (tb Table) Run(t *testing.T, modes ...Mode) {
	t.Helper()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			for _, tc := range Cases() {
				t.Run(tc.Name, func(t *testing.T) { tb.RunCase(t, mode, tc) })
			}
		})
	}
}

// RunCase runs tc in mode and checks its result.
func (tb Table) RunCase(t *testing.T, mode Mode, tc Case) {
	t.Helper()
	if why, ok := tb.NotApplicable[tc.Name]; ok {
		t.Skipf("not applicable to %s: %s", tb.Env.Backend, why)
	}
	c := tb.Env
	c.Marker = "skillbox-marker-" + RandomHex(8)
	dir := MakeSkill(t, tc.Skill)
	for link, target := range tc.Links {
		if target == SecretPath {
			target = c.Secret.Path
		}
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	job := runtime.Job{
		Sandbox: runtime.SandboxSpec{
			ID:       tb.NewID(),
			RootFS:   tb.RootFS,
			Image:    tb.Image,
			SkillDir: dir,
			Limits:   tc.Limits,
		},
		Invocation: runtime.Invocation{
			Args:   tc.Args(&c),
			Env:    tc.Env,
			Stdin:  []byte(tc.Stdin),
			Files:  tc.Files,
			Limits: tc.Limits,
		},
	}
	if a := job.Invocation.Args; len(a) > 1 && strings.HasPrefix(a[1], runtime.SkillMount+"/") {
		family := map[string]string{"python3": "python", "node": "node"}[a[0]]
		job.Invocation.ModuleEnv = runtime.ModulePathEnv(family, strings.TrimPrefix(a[1], runtime.SkillMount+"/"))
	}
	if job.Invocation.Limits.Timeout == 0 {
		job.Invocation.Limits.Timeout = 60 * time.Second
	}
	var res *runtime.Result
	var err error
	start := time.Now()
	if mode == Cold {
		res, err = tb.Runtime.Run(context.Background(), job)
	} else {
		res, err = RunWarm(t, tb.Runtime, job)
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("%s run in %s: reason %s exit %d signal %q", mode, time.Since(start).Round(10*time.Millisecond), res.Reason, res.ExitCode, res.Signal)
	if res.Warm != (mode == Warm) {
		t.Errorf("result says warm %v on the %s path", res.Warm, mode)
	}
	tc.Check(t, &c, res)
	if tb.After != nil {
		tb.After(t, job)
	}
}

// RunWarm runs job the way the pool does: boot, then (the sandbox
// waiting) deliver, wait, destroy.
func RunWarm(t testing.TB, rt runtime.Runtime, job runtime.Job) (*runtime.Result, error) {
	t.Helper()
	lc, ok := rt.(runtime.Lifecycle)
	if !ok {
		t.Fatalf("%s has no lifecycle", rt.Name())
	}
	boot := runtime.BootExec
	if runtime.PythonInvocation(job.Invocation.Args) {
		boot = runtime.BootPython
	}
	ctx := context.Background()
	spec := job.Sandbox
	spec.Boot = boot
	sb, err := lc.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}()
	if err := sb.Start(ctx); err != nil {
		return nil, err
	}
	if err := sb.Deliver(ctx, job.Invocation); err != nil {
		return nil, err
	}
	return sb.Wait(ctx)
}
