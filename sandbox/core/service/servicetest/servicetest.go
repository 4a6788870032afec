// Package servicetest holds fakes of the service's parts (runtime, images,
// audit log, skill index) for unit tests of the service and of the front
// ends built on it. Anything claiming isolation is tested with real
// sandboxes instead (the integration tests).
package servicetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/skills"
)

// Runtime is a runtime.Runtime whose behaviour each test sets; it records
// the jobs it was given.
type Runtime struct {
	RunFunc     func(ctx context.Context, job runtime.Job) (*runtime.Result, error)
	VersionFunc func(ctx context.Context) (string, error)

	mu   sync.Mutex
	jobs []runtime.Job
}

var (
	_ runtime.Runtime    = (*Runtime)(nil)
	_ runner.ImageSource = (*Images)(nil)
	_ audit.Auditor      = (*Auditor)(nil)
	_ service.SkillIndex = (*Index)(nil)
	_ runner.SkillPinner = LivePins{}
)

func (f *Runtime) Name() string { return "fake" }

// RunByLastArg is a RunFunc whose outcome the run's last argument picks,
// for tests that count runs by how they ended: "warm" (a warm start),
// "fail" (exit 3), "timeout", "egress" (2 connections, 1 denied), "boom"
// (the sandbox does not start), "block" (runs until cancelled), "talk"
// (writes "talking\n" to stdout, then runs until cancelled); anything
// else exits 0.
func RunByLastArg(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
	res := &runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit, Runtime: "fake"}}
	switch job.Invocation.Args[len(job.Invocation.Args)-1] {
	case "warm":
		res.Warm = true
	case "fail":
		res.ExitCode = 3
	case "timeout":
		res.ExitCode, res.Reason = -1, runtime.ReasonTimeout
	case "egress":
		res.Egress = &egress.Stats{Connections: 2, Denied: 1}
	case "boom":
		return nil, errors.New("the sandbox did not start")
	case "block":
		<-ctx.Done()
		return nil, context.Cause(ctx)
	case "talk":
		if job.Invocation.Stdout != nil {
			job.Invocation.Stdout.Write([]byte("talking\n"))
		}
		<-ctx.Done()
		res.ExitCode, res.Reason, res.Signal = 137, runtime.ReasonKilled, "SIGKILL"
	}
	return res, nil
}

func (f *Runtime) Version(ctx context.Context) (string, error) {
	if f.VersionFunc != nil {
		return f.VersionFunc(ctx)
	}
	return "fake-1.0", nil
}

func (f *Runtime) Run(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
	f.mu.Lock()
	f.jobs = append(f.jobs, job)
	f.mu.Unlock()
	if f.RunFunc != nil {
		return f.RunFunc(ctx, job)
	}
	return &runtime.Result{Stdout: []byte("ran " + strings.Join(job.Invocation.Args, " ") + "\n"), Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit, Runtime: "fake"}}, nil
}

func (f *Runtime) Jobs() []runtime.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]runtime.Job(nil), f.jobs...)
}

// Images hands out a fixed rootfs for every image name.
type Images struct {
	EnsureFunc func(ctx context.Context, name string) (runtime.ImageRef, string, error)
}

func (f *Images) Ensure(ctx context.Context, name string, _ io.Writer) (runtime.ImageRef, string, error) {
	if f.EnsureFunc != nil {
		return f.EnsureFunc(ctx, name)
	}
	return runtime.ImageRef{Name: name, Digest: "sha256:" + strings.Repeat("ab", 32)}, "/var/lib/fake/" + name, nil
}

// Auditor keeps records in memory; FailWith (or Fail) makes appends fail.
type Auditor struct {
	mu       sync.Mutex
	records  []audit.Record
	FailWith error
}

func (a *Auditor) Append(_ context.Context, r *audit.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.FailWith != nil {
		return errkind.Wrap(audit.ErrUnavailable, a.FailWith)
	}
	r.Seq = uint64(len(a.records) + 1)
	a.records = append(a.records, *r)
	return nil
}

func (a *Auditor) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.FailWith != nil {
		return errkind.Wrap(audit.ErrUnavailable, a.FailWith)
	}
	return nil
}

func (a *Auditor) Fail(err error) {
	a.mu.Lock()
	a.FailWith = err
	a.mu.Unlock()
}

func (a *Auditor) Events(event string) []audit.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []audit.Record
	for _, r := range a.records {
		if r.Event == event {
			out = append(out, r)
		}
	}
	return out
}

// Index is an in-memory service.SkillIndex.
type Index struct {
	mu     sync.Mutex
	Skills map[string]*skills.Skill
}

func (m *Index) Get(name string) (*skills.Skill, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.Skills[name]
	if !ok {
		return nil, fmt.Errorf("skill %q: %w", name, skills.ErrNotFound)
	}
	return s, nil
}

func (m *Index) List() []*skills.Skill {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*skills.Skill
	for _, s := range m.Skills {
		out = append(out, s)
	}
	return out
}

func (m *Index) Put(s *skills.Skill) {
	m.mu.Lock()
	m.Skills[s.Name] = s
	m.mu.Unlock()
}

func (m *Index) Remove(name string) {
	m.mu.Lock()
	delete(m.Skills, name)
	m.mu.Unlock()
}

// SkillSpec describes a skill directory to create for a test.
type SkillSpec struct {
	Name     string
	Allowed  []string // nil: allowed-tools not declared
	Requires []string
	Files    map[string]string
}

// MakeSkill writes a skill directory under root and returns it as the
// registry would index it (digest computed from the files).
func MakeSkill(t testing.TB, root string, sp SkillSpec) *skills.Skill {
	t.Helper()
	dir := filepath.Join(root, sp.Name)
	body := "# " + sp.Name + "\n\nUse scripts/run.py for " + sp.Name + ".\n"
	front := "---\nname: " + sp.Name + "\ndescription: Test skill " + sp.Name + ".\n"
	if sp.Allowed != nil {
		front += "allowed-tools: " + strings.Join(sp.Allowed, " ") + "\n"
	}
	front += "---\n"
	files := map[string]string{"SKILL.md": front + body}
	for k, v := range sp.Files {
		files[k] = v
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
	return IndexSkill(t, dir, sp, body)
}

func IndexSkill(t testing.TB, dir string, sp SkillSpec, body string) *skills.Skill {
	t.Helper()
	dg, err := skills.Digest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &skills.Skill{
		Name: sp.Name, Description: "Test skill " + sp.Name + ".", AllowedTools: sp.Allowed, Requires: sp.Requires,
		Body: body, Dir: dir, Location: filepath.Join(dir, "SKILL.md"), Digest: dg,
		Properties: map[string]any{"name": sp.Name},
	}
}

// NewIndex returns an index holding sks.
func NewIndex(sks ...*skills.Skill) *Index {
	m := &Index{Skills: map[string]*skills.Skill{}}
	for _, s := range sks {
		m.Put(s)
	}
	return m
}

// Records returns every record so far.
func (a *Auditor) Records() []audit.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]audit.Record(nil), a.records...)
}

// LivePins mounts the skill's own directory: fakes never run anything, so
// there is nothing to pin.
type LivePins struct{}

// Pin implements runner.SkillPinner.
func (LivePins) Pin(sk *skills.Skill) (string, error) { return sk.Dir, nil }

// Clock is a settable clock for the stores' Now option.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at a fixed moment.
func NewClock() *Clock { return &Clock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
