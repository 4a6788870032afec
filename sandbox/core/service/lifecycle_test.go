package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/skills"
)

// Unit tests of the lifecycle logic over fakes: what reaches the runtime,
// how answers fold into decisions, what is refused. The sandboxing itself
// is tested with real runsc in cmd/skillbox's lifecycle integration tests.

const lifecycleConfig = `
daemon {
  approvers = ["4242"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "Bash", "Read"]
}
policy "render" {
  skills = ["renders"]
  tools  = ["skills.render_command(echo:*)", "skills.render_command(false)"]
}
policy "lenient-hooks" {
  skills       = ["lenient"]
  hook_failure = "ignore"
}
policy "pinned" {
  skills       = ["pinned"]
  require_lock = true
}
policy "no-bash" {
  skills = ["nobash"]
  deny   = ["Bash"]
}
agent "reviewer" {
  uses_skills = ["plain", "renders"]
}
`

func newLifecycleFixture(t *testing.T, more ...servicetest.SkillSpec) *fixture {
	f, _ := newLifecycleFixtureLock(t, more...)
	return f
}

// newLifecycleFixtureLock also returns the config's lock file.
func newLifecycleFixtureLock(t *testing.T, more ...servicetest.SkillSpec) (*fixture, string) {
	t.Helper()
	lockFile := filepath.Join(t.TempDir(), "skills.lock")
	base := []servicetest.SkillSpec{
		{Name: "renders", Files: map[string]string{"data.txt": "x"}},
		{Name: "hooked", Files: hookFiles}, {Name: "lenient", Files: hookFiles}, {Name: "nobash", Files: hookFiles},
		{Name: "pinned", Files: map[string]string{"scripts/run.sh": "echo hi\n"}},
	}
	cfg := lifecycleConfig + fmt.Sprintf("skills {\n  lock_file = %q\n}\n", lockFile)
	return newFixtureWith(t, true, cfg, append(base, more...)), lockFile
}

// hookFiles are the scripts the hooks of the tests run: a hook that runs
// its skill's file is decided as skills.run_script of it.
var hookFiles = map[string]string{"hooks/check.sh": "exit 0\n", "hooks/post.sh": "exit 0\n"}

func withBody(f *fixture, name, body string) *skills.Skill {
	sk := *f.sk[name]
	sk.Body = body
	f.idx.Put(&sk)
	f.sk[name] = &sk
	return &sk
}

func withHooks(f *fixture, name string, hooks skills.Hooks) {
	sk := *f.sk[name]
	sk.Hooks = hooks
	f.idx.Put(&sk)
	f.sk[name] = &sk
}

func hook(event, matcher, command string) skills.Hooks {
	return skills.Hooks{event: {{Matcher: matcher, Hooks: []skills.HookCommand{{Type: "command", Command: command}}}}}
}

// shellCommand is the command a job runs with /bin/sh -c ("" for others).
func shellCommand(job runtime.Job) string {
	if len(job.Invocation.Args) == 3 && job.Invocation.Args[0] == "/bin/sh" && job.Invocation.Args[1] == "-c" {
		return job.Invocation.Args[2]
	}
	return ""
}

func TestActivateRendersCommandsThroughPolicy(t *testing.T) {
	f := newLifecycleFixture(t)
	ctx := context.Background()
	withBody(f, "renders", "Args: $0|$1|$ARGUMENTS\nDir: ${SKILL_DIR}\nOut: !`echo hi from ${SKILL_DIR}`\nBad: !`false`\nNo: !`cat /etc/passwd`\n")
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		switch cmd := shellCommand(job); cmd {
		case "echo hi from " + runtime.SkillMount:
			return &runtime.Result{Stdout: []byte("hi from the sandbox\n"), Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit}}, nil
		case "false":
			return &runtime.Result{Stderr: []byte("it failed\n"), Summary: outcome.Summary{ExitCode: 1, Reason: runtime.ReasonExit}}, nil
		default:
			return nil, fmt.Errorf("unexpected job %q", job.Invocation.Args)
		}
	}
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	res, err := f.svc.ActivateSkill(ctx, owner, api.ActivateParams{SessionID: sid, Name: "renders", Arguments: `a "b c"`})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Args: a|b c|a \"b c\"\n", "Dir: .\n", "Out: hi from the sandbox\n",
		"Bad: [skillbox: command `false` failed (exit status 1, run ", ": it failed]",
		"No: [skillbox: command `cat /etc/passwd` was not run: ",
	} {
		if !strings.Contains(res.Body, want) {
			t.Errorf("body lacks %q:\n%s", want, res.Body)
		}
	}
	if res.Tokens != skills.EstimateTokens(res.Body) || len(res.Commands) != 3 {
		t.Errorf("tokens %d, commands %+v", res.Tokens, res.Commands)
	}
	jobs := f.rt.Jobs()
	if len(jobs) != 2 {
		t.Fatalf("%d jobs ran, want 2 (the denied command never runs)", len(jobs))
	}
	for _, j := range jobs {
		if j.Sandbox.Network || j.Sandbox.SkillDir != f.sk["renders"].Dir || j.Invocation.Limits.Timeout > service.RenderCommandTimeout ||
			j.Invocation.Limits.StdoutBytes > service.RenderCommandOutput || j.Invocation.Limits.Timeout <= 0 {
			t.Errorf("command job: network %v, skill %q, limits %+v", j.Sandbox.Network, j.Sandbox.SkillDir, j.Invocation.Limits)
		}
	}
	if n := len(f.audit.Events("run.start")); n != 2 {
		t.Errorf("%d run.start records, want 2", n)
	}
	if n := len(f.audit.Events(service.EventSkillActivate)); n != 1 {
		t.Errorf("%d skills.activate records, want 1", n)
	}
}

func TestActivateRefusals(t *testing.T) {
	f := newLifecycleFixture(t)
	ctx := context.Background()
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	// The built-in default policy has no skills.render_command: "plain" may
	// not run commands.
	withBody(f, "plain", "Now: !`date`\n")
	res, err := f.svc.ActivateSkill(ctx, owner, api.ActivateParams{SessionID: sid, Name: "plain"})
	if err != nil || !strings.Contains(res.Body, "[skillbox: command `date` was not run:") || !strings.Contains(res.Body, "denied") || len(f.rt.Jobs()) != 0 {
		t.Errorf("denied command: %+v %v", res, err)
	}

	model := *f.sk["hooked"]
	model.DisableModelInvocation = true
	f.idx.Put(&model)
	user := *f.sk["lenient"]
	user.Properties = map[string]any{"user-invocable": false}
	f.idx.Put(&user)
	for _, tc := range []struct {
		name, inv, want string
	}{
		{"hooked", api.InvocationModel, "disable-model-invocation"},
		{"lenient", api.InvocationUser, "user-invocable: false"},
		{"plain", "robot", "invocation"},
	} {
		_, err := f.svc.ActivateSkill(ctx, owner, api.ActivateParams{SessionID: sid, Name: tc.name, Invocation: tc.inv})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s as %s: %v, want an error naming %q", tc.name, tc.inv, err, tc.want)
		}
	}
	if _, err := f.svc.ActivateSkill(ctx, owner, api.ActivateParams{SessionID: sid, Name: "hooked", Invocation: api.InvocationUser}); err != nil {
		t.Errorf("a person may invoke a skill that disables model invocation: %v", err)
	}
}

func TestCheckToolFoldsHooks(t *testing.T) {
	f := newLifecycleFixture(t)
	ctx := context.Background()
	withHooks(f, "hooked", hook(skills.HookPreToolUse, "Bash", "./hooks/check.sh"))
	withHooks(f, "lenient", hook(skills.HookPreToolUse, "Bash", "./hooks/check.sh"))
	withHooks(f, "nobash", hook(skills.HookPreToolUse, "Bash", "./hooks/check.sh"))
	var stdin []string
	answer := func(job runtime.Job) *runtime.Result {
		var ev struct {
			HookEventName string `json:"hook_event_name"`
			ToolName      string `json:"tool_name"`
			ToolInput     struct {
				Command string `json:"command"`
			} `json:"tool_input"`
		}
		if err := json.Unmarshal(job.Invocation.Stdin, &ev); err != nil || ev.HookEventName != skills.HookPreToolUse || ev.ToolName != "Bash" {
			return &runtime.Result{Stderr: []byte("bad event"), Summary: outcome.Summary{ExitCode: 1, Reason: runtime.ReasonExit}}
		}
		switch c := ev.ToolInput.Command; {
		case strings.HasPrefix(c, "rm"):
			return &runtime.Result{Stderr: []byte("no rm here\n"), Summary: outcome.Summary{ExitCode: 2, Reason: runtime.ReasonExit}}
		case c == "ask":
			return &runtime.Result{Stdout: []byte(`{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"sure?"}}`), Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit}}
		case c == "hang":
			return &runtime.Result{Summary: outcome.Summary{ExitCode: -1, Reason: runtime.ReasonTimeout}}
		case c == "junk":
			return &runtime.Result{Stdout: []byte(`{"decision":`), Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit}}
		}
		return &runtime.Result{Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit}}
	}
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		stdin = append(stdin, string(job.Invocation.Stdin))
		if !strings.Contains(shellCommand(job), "./hooks/check.sh") || !strings.Contains(shellCommand(job), "cd "+runtime.SkillMount) || job.Sandbox.Network {
			return nil, errors.New("the hook must run its command from the skill mount, without network")
		}
		return answer(job), nil
	}
	for _, tc := range []struct {
		skill, command, want, reason string
	}{
		{"hooked", "ls", "allow", ""},
		{"hooked", "rm -rf /", "deny", "no rm here"},
		{"hooked", "ask", "confirm", "sure?"},
		{"hooked", "hang", "deny", "fail closed"},
		{"hooked", "junk", "deny", "malformed JSON"},
		{"lenient", "hang", "allow", ""}, // hook_failure = "ignore"
		{"lenient", "rm x", "deny", "no rm here"},
		{"nobash", "ls", "deny", "denied"},
	} {
		t.Run(tc.skill+"/"+tc.command, func(t *testing.T) {
			sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{UsesSkills: []string{tc.skill}})).SessionID
			before := len(f.rt.Jobs())
			in, _ := json.Marshal(map[string]string{"command": tc.command})
			r, err := f.svc.CheckTool(ctx, owner, api.CheckToolParams{SessionID: sid, Tool: "Bash", Input: in})
			if err != nil {
				t.Fatal(err)
			}
			if r.Decision != tc.want || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("decision %+v, want %s with %q", r, tc.want, tc.reason)
			}
			ran := len(f.rt.Jobs()) - before
			if tc.skill == "nobash" && ran != 0 {
				t.Errorf("a hook ran although policy denies the tool")
			}
			if tc.skill != "nobash" && ran != 1 {
				t.Errorf("%d hook runs, want 1", ran)
			}
		})
	}
	// Another tool: the Bash matcher does not run.
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{UsesSkills: []string{"hooked"}})).SessionID
	before := len(f.rt.Jobs())
	if r, err := f.svc.CheckTool(ctx, owner, api.CheckToolParams{SessionID: sid, Tool: "Read"}); err != nil || r.Decision != "allow" || len(f.rt.Jobs()) != before {
		t.Errorf("Read: %+v %v", r, err)
	}
}

func TestReportToolRunsPostToolUse(t *testing.T) {
	f := newLifecycleFixture(t)
	ctx := context.Background()
	withHooks(f, "hooked", hook(skills.HookPostToolUse, "Bash|Read", "./hooks/post.sh"))
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		if !strings.Contains(string(job.Invocation.Stdin), `"tool_response":{"ok":true}`) {
			return &runtime.Result{Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit}}, nil
		}
		return &runtime.Result{Stdout: []byte(`{"decision":"block","reason":"check the output"}`), Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit}}, nil
	}
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{UsesSkills: []string{"hooked"}})).SessionID
	r, err := f.svc.ReportTool(ctx, owner, api.ReportToolParams{SessionID: sid, Tool: "Read", Result: json.RawMessage(`{"ok":true}`)})
	if err != nil || !r.Block || r.Reason != "check the output" || len(r.Hooks) != 1 {
		t.Errorf("report: %+v %v", r, err)
	}
	r, err = f.svc.ReportTool(ctx, owner, api.ReportToolParams{SessionID: sid, Tool: "skills.read"})
	if err != nil || r.Block || len(r.Hooks) != 0 || r.Decision != "allow" {
		t.Errorf("report of an unmatched tool: %+v %v", r, err)
	}
}

func TestBoundSkills(t *testing.T) {
	f := newLifecycleFixture(t)
	ctx := context.Background()
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{Agent: "reviewer", UsesSkills: []string{"hooked", "plain"}})).SessionID
	ins := mustV(f.svc.Instructions(ctx, owner, api.SessionParams{SessionID: sid}))
	for _, n := range []string{"# plain", "# renders", "# hooked"} {
		if !strings.Contains(ins.Instructions, n) {
			t.Errorf("the session lacks %s", n)
		}
	}
	for _, p := range []api.CreateSessionParams{{Agent: "nobody"}, {UsesSkills: []string{"missing"}}, {UsesSkills: []string{"Bad Name"}}, {UsesSkills: []string{"pinned"}}} {
		if _, err := f.svc.CreateSession(ctx, owner, p); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}

func TestLockRequired(t *testing.T) {
	f, lockFile := newLifecycleFixtureLock(t)
	ctx := context.Background()

	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	load := func() error {
		_, err := f.svc.LoadSkills(ctx, owner, api.LoadParams{SessionID: sid, Names: []string{"pinned"}})
		return err
	}
	if err := load(); !errors.Is(err, api.ErrDenied) || !strings.Contains(err.Error(), "not in the lock file") {
		t.Fatalf("load before the lock: %v", err)
	}
	if _, err := f.svc.LockSkills(ctx, owner, api.LockParams{Names: []string{"pinned"}}); !errors.Is(err, api.ErrDenied) {
		t.Errorf("a non-approver locked: %v", err)
	}
	mustV(f.svc.LockSkills(ctx, approver, api.LockParams{Names: []string{"pinned"}}))
	if err := load(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.RunScript(ctx, owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/run.sh"}); err != nil {
		t.Fatal(err)
	}
	// One byte changes: a new digest.
	old := f.sk["pinned"].Digest
	script := filepath.Join(f.sk["pinned"].Dir, "scripts", "run.sh")
	if err := os.WriteFile(script, []byte("Echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := servicetest.IndexSkill(t, f.sk["pinned"].Dir, servicetest.SkillSpec{Name: "pinned"}, f.sk["pinned"].Body)
	f.idx.Put(changed)
	err := load()
	for _, want := range []string{old, changed.Digest, "skillbox skills diff"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("load of the changed skill: %v, want it to name %q", err, want)
		}
	}
	// skillbox run's path: Service.Run checks the lock too.
	_, err = f.svc.Run(ctx, owner, service.RunRequest{Skill: changed, Script: "scripts/run.sh"}, service.RunOptions{Method: "skillbox run"})
	if err == nil || !strings.Contains(err.Error(), old) || !strings.Contains(err.Error(), changed.Digest) {
		t.Errorf("run of the changed skill: %v", err)
	}
	if n := len(f.audit.Events(service.EventLockRefused)); n != 3 {
		t.Errorf("%d lock refusals audited, want 3", n)
	}
	mustV(f.svc.LockSkills(ctx, approver, api.LockParams{Names: []string{"pinned"}}))
	if err := load(); err != nil {
		t.Errorf("after re-locking: %v", err)
	}
	var pins, refused int
	for _, r := range f.audit.Events(service.EventSkillLock) {
		if r.Outcome == "ok" {
			pins++
		} else {
			refused++
		}
	}
	if pins != 2 || refused != 1 {
		t.Errorf("%d pins and %d refused lock attempts audited, want 2 and 1", pins, refused)
	}
	l, err := skills.ReadLock(lockFile)
	if err != nil || l.Skills["pinned"].Digest != changed.Digest || l.Skills["pinned"].ApprovedBy == "" || l.Skills["pinned"].ApprovedAt.Before(time.Now().Add(-time.Hour)) {
		t.Errorf("lock file: %+v %v", l, err)
	}
}

func TestTokenCounts(t *testing.T) {
	var more []servicetest.SkillSpec
	for i := range 30 {
		more = append(more, servicetest.SkillSpec{Name: fmt.Sprintf("extra-%02d", i)})
	}
	cfg := lifecycleConfig + "skills {\n  catalog_budget_tokens = 120\n}\n"
	f := newFixtureWith(t, true, cfg, more)
	ctx := context.Background()
	list := mustV(f.svc.ListSkills(ctx, owner, api.ListSkillsParams{}))
	for _, s := range list {
		if s.Tokens != skills.CatalogEntryTokens(f.sk[s.Name]) || s.BodyTokens != skills.EstimateTokens(f.sk[s.Name].Body) || s.Tokens == 0 {
			t.Errorf("skills.list %s: tokens %d, body %d", s.Name, s.Tokens, s.BodyTokens)
		}
	}
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	lr := mustV(f.svc.LoadSkills(ctx, owner, api.LoadParams{SessionID: sid, Names: []string{"plain"}}))
	if lr.ActiveSkills[0].Tokens != skills.EstimateTokens(f.sk["plain"].Body) {
		t.Errorf("receipt tokens %d", lr.ActiveSkills[0].Tokens)
	}
	rr := mustV(f.svc.ReadSkillFile(ctx, owner, api.ReadParams{SessionID: sid, Path: "scripts/run.sh"}))
	if rr.Tokens != skills.EstimateTokens(rr.Content) || rr.Tokens == 0 {
		t.Errorf("read tokens %d", rr.Tokens)
	}
	ins := mustV(f.svc.Instructions(ctx, owner, api.SessionParams{SessionID: sid}))
	if n := skills.EstimateTokens(ins.AvailableSkills); n > 120 || !strings.Contains(ins.AvailableSkills, "<available_skills>") {
		t.Errorf("the catalog is %d tokens over a budget of 120:\n%s", n, ins.AvailableSkills)
	}
}
