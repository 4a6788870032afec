package mcp_test

import (
	"context"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/sandbox/doors/mcp"
	"github.com/skillbox/skillbox/skills"
)

// A hook policy holds for confirmation (a hook is a run of its skill) is
// approvable over MCP as a held skills_run_script is: by elicitation, or
// by repeating tools_check with the approved confirmation_id(s); once
// approved it runs once.

const hookConfig = `
daemon {
  approvers = ["4242"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script", "Bash"]
}
policy "guarded-hook" {
  skills  = ["guarded-hook"]
  confirm = ["skills.run_script"]
}
`

// newHookService serves guarded-hook, whose PreToolUse hooks (one per
// command) run for every tool; they answer allow.
func newHookService(t *testing.T, commands ...string) *realService {
	t.Helper()
	sk := servicetest.MakeSkill(t, t.TempDir(), servicetest.SkillSpec{Name: "guarded-hook", Files: map[string]string{
		"scripts/check.sh": "exit 0\n", "scripts/other.sh": "exit 0\n",
	}})
	var hcs []skills.HookCommand
	for _, c := range commands {
		hcs = append(hcs, skills.HookCommand{Type: "command", Command: c})
	}
	sk.Hooks = skills.Hooks{skills.HookPreToolUse: {{Matcher: "*", Hooks: hcs}}}
	rs := newRealServiceWith(t, hookConfig, sk)
	rs.rt.RunFunc = func(context.Context, runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{Summary: outcome.Summary{ExitCode: 0, Reason: runtime.ReasonExit, Runtime: "fake"}}, nil
	}
	return rs
}

func TestHeldHookElicitation(t *testing.T) {
	for _, tt := range []struct {
		name      string
		commands  []string
		action    string
		wantRuns  int
		wantError string
	}{
		{"one hook approved", []string{"./scripts/check.sh"}, "accept", 1, ""},
		{"two hooks approved", []string{"./scripts/check.sh", "./scripts/other.sh"}, "accept", 2, ""},
		{"declined", []string{"./scripts/check.sh"}, "decline", 0, "denied: the user declined the run at the client; confirmation "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := newHookService(t, tt.commands...)
			asked := 0
			var msg string
			cs := connect(t, rs.svc, mcp.Options{Caller: approver, ElicitApprovals: true}, &sdk.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					asked++
					msg = req.Params.Message
					if tt.action == "accept" {
						return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
					}
					return &sdk.ElicitResult{Action: tt.action}, nil
				},
			})
			call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"guarded-hook"}})
			res := call(t, cs, mcp.ToolCheck, map[string]any{"tool": "Bash", "input": map[string]any{"command": "ls"}})
			if asked != 1 || !strings.Contains(msg, "./scripts/check.sh") {
				t.Errorf("asked %d times, last %q; want once, naming the hook", asked, msg)
			}
			if runs := len(rs.rt.Jobs()); runs != tt.wantRuns {
				t.Errorf("%d hook runs, want %d (result %q)", runs, tt.wantRuns, text(res))
			}
			if tt.wantError != "" {
				if !res.IsError || !strings.Contains(text(res), tt.wantError) {
					t.Errorf("result isError=%v %q, want error %q", res.IsError, text(res), tt.wantError)
				}
				return
			}
			var cr api.CheckToolResult
			structured(t, res, &cr)
			if res.IsError || cr.Decision != api.DecisionAllow {
				t.Errorf("approved check: isError=%v %q %+v", res.IsError, text(res), cr)
			}
		})
	}
}

// A host without elicitation gets the ids, has them approved, and repeats
// the check with them; the approval is used once.
func TestHeldHookConfirmationIDs(t *testing.T) {
	rs := newHookService(t, "./scripts/check.sh", "./scripts/other.sh")
	cs := connect(t, rs.svc, mcp.Options{Caller: someone}, nil)
	call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"guarded-hook"}})
	check := func(args map[string]any) *sdk.CallToolResult {
		args["tool"], args["input"] = "Bash", map[string]any{"command": "ls"}
		return call(t, cs, mcp.ToolCheck, args)
	}
	res := check(map[string]any{})
	if !res.IsError || !strings.HasPrefix(text(res), "confirmation_required: ") || len(rs.rt.Jobs()) != 0 {
		t.Fatalf("held hooks: isError=%v %q, %d runs", res.IsError, text(res), len(rs.rt.Jobs()))
	}
	list, err := rs.svc.ListConfirmations(context.Background(), approver, api.ListConfirmationsParams{State: string(api.ConfirmationPending)})
	if err != nil || len(list.Confirmations) != 2 {
		t.Fatalf("pending confirmations %+v, %v; want 2", list, err)
	}
	var ids []string
	for _, c := range list.Confirmations {
		if !strings.Contains(text(res), c.ID) {
			t.Errorf("the error %q does not name %s", text(res), c.ID)
		}
		if _, err := rs.svc.ApproveConfirmation(context.Background(), approver, api.ConfirmationIDParams{ID: c.ID}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	res = check(map[string]any{"confirmation_id": ids[0], "confirmation_ids": ids[1:]})
	var cr api.CheckToolResult
	structured(t, res, &cr)
	if res.IsError || cr.Decision != api.DecisionAllow || len(rs.rt.Jobs()) != 2 {
		t.Fatalf("approved: isError=%v %q %+v, %d runs; want allow, 2 runs", res.IsError, text(res), cr, len(rs.rt.Jobs()))
	}
	// Used: the same ids do not run the hooks again.
	res = check(map[string]any{"confirmation_ids": ids})
	if !res.IsError || len(rs.rt.Jobs()) != 2 {
		t.Errorf("reused approvals: isError=%v %q, %d runs; want a refusal and still 2 runs", res.IsError, text(res), len(rs.rt.Jobs()))
	}
}
