package mcp_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/skills"
)

// fakeService is an api.Service over a real skills registry and the real
// confined read, with runs and confirmations scripted by the test: enough
// to exercise the adapter's logic (decode, call, encode) without sandboxes.
type fakeService struct {
	t   *testing.T
	reg *skills.Registry

	mu       sync.Mutex
	sessions map[string][]string // session -> loaded skills, load order
	next     int
	calls    []string

	// run answers RunScript; nil runs nothing and reports exit 0.
	run func(ctx context.Context, p api.RunScriptParams) (*api.RunScriptResult, error)
	// approve and deny answer the confirmation calls.
	approve, deny func(id string) error
}

var _ api.Service = (*fakeService)(nil)

func newFake(t *testing.T) *fakeService {
	t.Helper()
	reg, err := skills.NewRegistry(skills.RegistryOptions{Roots: []string{mustAbs(t, "testdata/skills")}, AllowExtensions: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &fakeService{t: t, reg: reg, sessions: map[string][]string{}}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (f *fakeService) record(call string) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
}

func (f *fakeService) called(call string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.calls, call)
}

func (f *fakeService) CreateSession(context.Context, api.Peer, api.CreateSessionParams) (*api.CreateSessionResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	id := "s" + strconv.Itoa(f.next)
	f.sessions[id] = nil
	return &api.CreateSessionResult{SessionID: id}, nil
}

func (f *fakeService) CloseSession(_ context.Context, _ api.Peer, p api.SessionParams) (*api.CloseSessionResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sessions, p.SessionID)
	return &api.CloseSessionResult{Closed: true}, nil
}

func (f *fakeService) Instructions(_ context.Context, _ api.Peer, p api.SessionParams) (*api.InstructionsResult, error) {
	avail := skills.RenderAvailable(f.reg.List(), 0)
	return &api.InstructionsResult{Instructions: "Load a skill before using it.\n" + avail, AvailableSkills: avail}, nil
}

func (f *fakeService) ListSkills(context.Context, api.Peer, api.ListSkillsParams) ([]api.SkillInfo, error) {
	var out []api.SkillInfo
	for _, s := range f.reg.List() {
		out = append(out, api.SkillInfo{
			Name: s.Name, Description: s.Description, Location: s.Location, Digest: s.Digest,
			Tags: append([]string{}, s.Tags...), ModelInvocable: !s.DisableModelInvocation, UserInvocable: s.UserInvocable(),
		})
	}
	return out, nil
}

func (f *fakeService) receipt(session string) *api.LoadResult {
	res := &api.LoadResult{ActiveSkills: []api.ActiveSkill{}}
	for _, n := range f.sessions[session] {
		s, _ := f.reg.Get(n)
		res.ActiveSkills = append(res.ActiveSkills, api.ActiveSkill{Name: s.Name, Location: s.Location, RootDir: s.Dir, Digest: s.Digest, Properties: s.Properties})
	}
	return res
}

func (f *fakeService) LoadSkills(_ context.Context, _ api.Peer, p api.LoadParams) (*api.LoadResult, error) {
	f.record("load:" + p.SessionID)
	for _, n := range p.Names {
		if _, err := f.reg.Get(n); err != nil {
			return nil, errkind.Errorf(api.ErrNotFound, "skill %q: call skills.list to see the skills", n)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.Mode == api.LoadAdd {
		for _, n := range p.Names {
			if !slices.Contains(f.sessions[p.SessionID], n) {
				f.sessions[p.SessionID] = append(f.sessions[p.SessionID], n)
			}
		}
	} else {
		f.sessions[p.SessionID] = slices.Clone(p.Names)
	}
	return f.receipt(p.SessionID), nil
}

func (f *fakeService) UnloadSkills(_ context.Context, _ api.Peer, p api.UnloadParams) (*api.LoadResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.All {
		f.sessions[p.SessionID] = nil
	} else {
		f.sessions[p.SessionID] = slices.DeleteFunc(f.sessions[p.SessionID], func(n string) bool { return slices.Contains(p.Names, n) })
	}
	return f.receipt(p.SessionID), nil
}

func (f *fakeService) ReadSkillFile(_ context.Context, _ api.Peer, p api.ReadParams) (*api.ReadResult, error) {
	f.mu.Lock()
	loaded := f.sessions[p.SessionID]
	f.mu.Unlock()
	name := p.Skill
	if name == "" && len(loaded) > 0 {
		name = loaded[len(loaded)-1]
	}
	if !slices.Contains(loaded, name) {
		return nil, errkind.Errorf(api.ErrInvalidParams, "skill %q is not loaded in this session; load it first", name)
	}
	s, _ := f.reg.Get(name)
	fc, err := skills.ReadFile(s.Dir, p.Path, skills.ReadOptions{Offset: p.Offset, Length: p.Length, MaxBytes: 64})
	if err != nil {
		kind := api.ErrInvalidParams
		if errors.Is(err, skills.ErrNotFound) {
			kind = api.ErrNotFound
		}
		return nil, fmt.Errorf("%w: %w", kind, err)
	}
	return &api.ReadResult{Skill: name, Path: fc.Path, Size: fc.Size, SHA256: fc.SHA256, Encoding: fc.Encoding, Content: fc.Content, Truncated: fc.Truncated}, nil
}

func (f *fakeService) RunScript(ctx context.Context, _ api.Peer, p api.RunScriptParams) (*api.RunScriptResult, error) {
	f.record("run:" + p.Path + ":" + p.ConfirmationID)
	if f.run == nil {
		return &api.RunScriptResult{RunID: "r1", Path: p.Path, Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	return f.run(ctx, p)
}

func (f *fakeService) RunCode(context.Context, api.Peer, api.RunCodeParams) (*api.RunScriptResult, error) {
	return nil, errkind.Errorf(api.ErrUnavailable, "run_code is not available here")
}

func (f *fakeService) CheckTool(_ context.Context, _ api.Peer, p api.CheckToolParams) (*api.CheckToolResult, error) {
	return &api.CheckToolResult{Decision: api.DecisionAllow, Rule: "default", Reason: string(p.Input)}, nil
}

func (f *fakeService) CheckSkill(_ context.Context, _ api.Peer, p api.CheckSkillParams) (*api.CheckSkillResult, error) {
	return &api.CheckSkillResult{Skill: p.Skill}, nil
}

func (f *fakeService) ListConfirmations(context.Context, api.Peer, api.ListConfirmationsParams) (*api.ListConfirmationsResult, error) {
	return &api.ListConfirmationsResult{Confirmations: []*api.Confirmation{{ID: "c1", Details: map[string]string{"script": "scripts/greet.sh"}}}}, nil
}

func (f *fakeService) ApproveConfirmation(_ context.Context, _ api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	f.record("approve:" + p.ID)
	if f.approve != nil {
		if err := f.approve(p.ID); err != nil {
			return nil, err
		}
	}
	return &api.Confirmation{ID: p.ID, State: api.ConfirmationApproved}, nil
}

func (f *fakeService) DenyConfirmation(_ context.Context, _ api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	f.record("deny:" + p.ID)
	if f.deny != nil {
		if err := f.deny(p.ID); err != nil {
			return nil, err
		}
	}
	return &api.Confirmation{ID: p.ID, State: api.ConfirmationDenied}, nil
}

func (f *fakeService) CancelRun(context.Context, api.Peer, api.CancelRunParams) (*api.CancelRunResult, error) {
	return &api.CancelRunResult{}, nil
}

func (f *fakeService) ListRuns(context.Context, api.Peer, api.RunsListParams) (*api.RunsListResult, error) {
	return &api.RunsListResult{Runs: []api.BackgroundRun{}}, nil
}

func (f *fakeService) RunLogs(_ context.Context, _ api.Peer, p api.RunLogsParams) (*api.RunLogsResult, error) {
	return &api.RunLogsResult{RunID: p.RunID, Encoding: "utf-8", State: api.RunExited, EOF: true}, nil
}

func (f *fakeService) WaitRun(_ context.Context, _ api.Peer, p api.RunWaitParams) (*api.BackgroundRun, error) {
	return &api.BackgroundRun{RunID: p.RunID, State: api.RunExited}, nil
}

func (f *fakeService) PauseSession(_ context.Context, _ api.Peer, p api.SessionParams) (*api.PauseSessionResult, error) {
	return &api.PauseSessionResult{SessionID: p.SessionID}, nil
}

func (f *fakeService) ResumeSession(_ context.Context, _ api.Peer, p api.ResumeSessionParams) (*api.ResumeSessionResult, error) {
	return &api.ResumeSessionResult{SessionID: p.SessionID}, nil
}

func (f *fakeService) ForkSession(_ context.Context, _ api.Peer, p api.SessionParams) (*api.ForkSessionResult, error) {
	return &api.ForkSessionResult{From: p.SessionID}, nil
}

func (f *fakeService) SignalRun(_ context.Context, _ api.Peer, p api.RunSignalParams) (*api.BackgroundRun, error) {
	return &api.BackgroundRun{RunID: p.RunID, State: api.RunRunning}, nil
}
