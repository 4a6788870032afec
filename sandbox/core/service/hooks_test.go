package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/skills"
)

// A hook is a run of its skill: the policy of skills.run_script (or, for
// arbitrary shell, skills.run_code too), its confirmations and denials
// hold for it as for the model's own calls.

const hookPolicyConfig = `
daemon {
  approvers = ["4242"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "skills.run_code", "Bash", "Read"]
}
policy "guarded" {
  skills  = ["guarded-hook"]
  confirm = ["skills.run_script"]
}
policy "guarded-path" {
  skills  = ["guarded-path"]
  confirm = ["skills.run_script(scripts/deploy.sh)"]
}
policy "locked" {
  skills = ["locked-hook"]
  deny   = ["skills.run_script", "skills.run_code"]
}
policy "no-code" {
  skills = ["no-code"]
  deny   = ["skills.run_code"]
}
`

var hookScripts = map[string]string{"scripts/deploy.sh": "echo deployed\n", "scripts/other.sh": "exit 0\n"}

func newHookFixture(t *testing.T) *fixture {
	t.Helper()
	var specs []servicetest.SkillSpec
	for _, n := range []string{"guarded-hook", "guarded-path", "locked-hook", "no-code", "open-hook"} {
		specs = append(specs, servicetest.SkillSpec{Name: n, Files: hookScripts})
	}
	f := newFixtureWith(t, true, hookPolicyConfig, specs)
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit}}, nil
	}
	return f
}

// hookSession is a session with skill loaded, whose only hook is command
// on event for every tool.
func hookSession(t *testing.T, f *fixture, skill, event, command string) string {
	t.Helper()
	withHooks(f, skill, hook(event, "*", command))
	return mustV(f.svc.CreateSession(context.Background(), owner, api.CreateSessionParams{UsesSkills: []string{skill}})).SessionID
}

// callHooks is tools.check (PreToolUse) or tools.report (PostToolUse) of
// Bash: the hooks' decision, and the error.
func callHooks(f *fixture, event, sid string, ids ...string) (string, []api.HookRun, error) {
	ctx := context.Background()
	in := json.RawMessage(`{"command":"ls"}`)
	if event == skills.HookPreToolUse {
		r, err := f.svc.CheckTool(ctx, owner, api.CheckToolParams{SessionID: sid, Tool: "Bash", Input: in, ConfirmationIDs: ids})
		if err != nil {
			return "", nil, err
		}
		return r.Decision, nil, nil
	}
	r, err := f.svc.ReportTool(ctx, owner, api.ReportToolParams{SessionID: sid, Tool: "Bash", Input: in, Result: json.RawMessage(`{"ok":true}`), ConfirmationIDs: ids})
	if err != nil {
		return "", nil, err
	}
	d := "allow"
	if r.Block {
		d = "deny"
	}
	return d, r.Hooks, nil
}

func TestHookNeedsConfirmation(t *testing.T) {
	for _, tc := range []struct {
		skill, command string
		held           bool
	}{
		{"guarded-hook", "./scripts/deploy.sh", true},
		{"guarded-hook", "sh scripts/deploy.sh --now", true},
		{"guarded-hook", "./scripts/deploy.sh && true", true},
		{"guarded-hook", "echo hi", true},
		{"guarded-path", "./scripts/deploy.sh", true},
		{"guarded-path", "bash ./scripts/deploy.sh", true},
		// Shell that cannot be read as one script is held by a
		// path-specific confirm too.
		{"guarded-path", "cat scripts/deploy.sh | sh", true},
		{"guarded-path", "./scripts/other.sh", false},
		{"open-hook", "./scripts/deploy.sh", false},
	} {
		for _, event := range []string{skills.HookPreToolUse, skills.HookPostToolUse} {
			t.Run(tc.skill+"/"+event+"/"+tc.command, func(t *testing.T) {
				f := newHookFixture(t)
				sid := hookSession(t, f, tc.skill, event, tc.command)
				_, _, err := callHooks(f, event, sid)
				if !tc.held {
					if err != nil || len(f.rt.Jobs()) != 1 {
						t.Fatalf("an allowed hook: %v, %d runs (want 1)", err, len(f.rt.Jobs()))
					}
					return
				}
				if api.KindOf(err) != api.KindConfirmationRequired {
					t.Fatalf("a held hook: %v (kind %q), want confirmation_required", err, api.KindOf(err))
				}
				if n := len(f.rt.Jobs()); n != 0 {
					t.Fatalf("the hook ran %d times without approval", n)
				}
				data := api.ErrorData(err)
				id, _ := data["confirmation_id"].(string)
				if ids, _ := data["confirmation_ids"].([]string); id == "" || len(ids) != 1 || ids[0] != id {
					t.Fatalf("error data %v", data)
				}
				// The approver sees what the hook runs.
				cs := mustV(f.svc.ListConfirmations(context.Background(), approver, api.ListConfirmationsParams{State: "pending"}))
				if len(cs.Confirmations) != 1 || cs.Confirmations[0].Details["command"] != tc.command {
					t.Errorf("pending confirmations %+v, want one showing the command", cs.Confirmations)
				}
				if len(f.audit.Events(audit.EventConfirmRequest)) != 1 || len(f.audit.Events(audit.EventRunStart)) != 0 {
					t.Errorf("audit: %d confirmation requests, %d run starts", len(f.audit.Events(audit.EventConfirmRequest)), len(f.audit.Events(audit.EventRunStart)))
				}
				// Still pending: not run.
				if _, _, err := callHooks(f, event, sid, id); api.KindOf(err) != api.KindConfirmationRequired || len(f.rt.Jobs()) != 0 {
					t.Fatalf("with a pending approval: %v, %d runs", err, len(f.rt.Jobs()))
				}
				mustV(f.svc.ApproveConfirmation(context.Background(), approver, api.ConfirmationIDParams{ID: id}))
				dec, hooks, err := callHooks(f, event, sid, id)
				if err != nil || dec != "allow" || len(f.rt.Jobs()) != 1 {
					t.Fatalf("approved: %s %v, %d runs (want 1)", dec, err, len(f.rt.Jobs()))
				}
				if event == skills.HookPostToolUse && (len(hooks) != 1 || hooks[0].RunID == "") {
					t.Errorf("hooks %+v", hooks)
				}
				used := 0
				for _, r := range f.audit.Events(audit.EventConfirmUse) {
					if r.Outcome == string(api.ConfirmationUsed) {
						used++
					}
				}
				if used != 1 {
					t.Errorf("%d confirmation uses audited, want 1", used)
				}
				// Approvals are single-use.
				if _, _, err := callHooks(f, event, sid, id); api.KindOf(err) != api.KindConfirmationRequired || len(f.rt.Jobs()) != 1 {
					t.Fatalf("the approval used twice: %v, %d runs", err, len(f.rt.Jobs()))
				}
			})
		}
	}
}

// Several held hooks of one call are named together, and one repeat with
// all the approvals runs them all.
func TestHooksNeedSeveralConfirmations(t *testing.T) {
	f := newHookFixture(t)
	ctx := context.Background()
	withHooks(f, "guarded-hook", skills.Hooks{skills.HookPostToolUse: {{Matcher: "*", Hooks: []skills.HookCommand{
		{Type: "command", Command: "./scripts/deploy.sh"}, {Type: "command", Command: "./scripts/other.sh"}}}}})
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{UsesSkills: []string{"guarded-hook"}})).SessionID
	_, _, err := callHooks(f, skills.HookPostToolUse, sid)
	ids, _ := api.ErrorData(err)["confirmation_ids"].([]string)
	if api.KindOf(err) != api.KindConfirmationRequired || len(ids) != 2 || len(f.rt.Jobs()) != 0 {
		t.Fatalf("%v, ids %v, %d runs", err, ids, len(f.rt.Jobs()))
	}
	for _, id := range ids {
		mustV(f.svc.ApproveConfirmation(ctx, approver, api.ConfirmationIDParams{ID: id}))
	}
	if _, hooks, err := callHooks(f, skills.HookPostToolUse, sid, ids...); err != nil || len(hooks) != 2 || len(f.rt.Jobs()) != 2 {
		t.Fatalf("approved: %v, %+v, %d runs", err, hooks, len(f.rt.Jobs()))
	}
}

func TestHookDeniedByPolicy(t *testing.T) {
	for _, tc := range []struct {
		skill, command string
		denied         bool
	}{
		{"locked-hook", "./scripts/deploy.sh", true},
		{"locked-hook", "echo hi", true},
		// Arbitrary shell is code; a file of the skill is its script.
		{"no-code", "echo hi", true},
		{"no-code", "./scripts/deploy.sh", false},
	} {
		for _, event := range []string{skills.HookPreToolUse, skills.HookPostToolUse} {
			t.Run(tc.skill+"/"+event+"/"+tc.command, func(t *testing.T) {
				f := newHookFixture(t)
				sid := hookSession(t, f, tc.skill, event, tc.command)
				dec, _, err := callHooks(f, event, sid)
				if err != nil {
					t.Fatal(err)
				}
				ran := len(f.rt.Jobs())
				if !tc.denied {
					if dec != "allow" || ran != 1 {
						t.Fatalf("decision %s, %d runs; want allow, 1", dec, ran)
					}
					return
				}
				if dec != "deny" || ran != 0 {
					t.Fatalf("decision %s, %d runs; want deny and no run", dec, ran)
				}
				denied := 0
				for _, r := range f.audit.Events(audit.EventDecision) {
					if r.Decision != nil && r.Decision.Effect == "deny" && strings.HasPrefix(r.Decision.Tool, "skills.run_") {
						denied++
					}
				}
				if denied != 1 {
					t.Errorf("%d audited denials of the hook's run, want 1", denied)
				}
			})
		}
	}
}

// tools.report is decided by policy as tools.check is: a call policy
// denies runs no hook.
func TestReportToolDecidedByPolicy(t *testing.T) {
	f := newHookFixture(t)
	ctx := context.Background()
	sid := hookSession(t, f, "open-hook", skills.HookPostToolUse, "./scripts/other.sh")
	for _, tc := range []struct {
		tool, want string
		runs       int
	}{
		{"Write", "deny", 0},
		{"mcp__fs__delete", "deny", 0},
		{"Read", "allow", 1},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			before := len(f.rt.Jobs())
			in := json.RawMessage(`{"file_path":"/tmp/x"}`)
			chk := mustV(f.svc.CheckTool(ctx, owner, api.CheckToolParams{SessionID: sid, Tool: tc.tool, Input: in}))
			rep, err := f.svc.ReportTool(ctx, owner, api.ReportToolParams{SessionID: sid, Tool: tc.tool, Input: in})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Decision != tc.want || chk.Decision != tc.want || rep.Rule != chk.Rule || rep.Block != (tc.want == "deny") {
				t.Errorf("tools.report %+v, tools.check %+v; want %s from the same rule", rep, chk, tc.want)
			}
			if n := len(f.rt.Jobs()) - before; n != tc.runs || len(rep.Hooks) != tc.runs {
				t.Errorf("%d hook runs, %d hooks reported; want %d", n, len(rep.Hooks), tc.runs)
			}
		})
	}
	n := 0
	for _, r := range f.audit.Events(audit.EventDecision) {
		if r.Method == api.MethodToolsReport && r.Decision != nil && r.Decision.Tool == "Write" && r.Decision.Effect == "deny" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d audited denials of the reported Write, want 1", n)
	}
}

func TestHookConfirmationIDsBounded(t *testing.T) {
	f := newHookFixture(t)
	sid := hookSession(t, f, "guarded-hook", skills.HookPreToolUse, "./scripts/deploy.sh")
	ids := make([]string, 65)
	for i := range ids {
		ids[i] = fmt.Sprintf("cnf_%d", i)
	}
	for _, event := range []string{skills.HookPreToolUse, skills.HookPostToolUse} {
		if _, _, err := callHooks(f, event, sid, ids...); api.KindOf(err) != api.KindInvalidParams || len(f.rt.Jobs()) != 0 {
			t.Errorf("%s with %d ids: %v, %d runs", event, len(ids), err, len(f.rt.Jobs()))
		}
	}
}
