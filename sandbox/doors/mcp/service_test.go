package mcp_test

import (
	"context"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/doors/mcp"
	"github.com/skillbox/skillbox/skills"
)

// The adapter over the real service (policy, confirmations, audit), with a
// fake runtime: what MCP adds must not change what the service decides.

const serviceConfig = `
daemon {
  approvers = ["4242"]
}
policy "default" {
  skills = ["*"]
  tools  = ["skills.read", "skills.run_script"]
}
policy "needs-approval" {
  skills  = ["guarded-*"]
  confirm = ["skills.run_script"]
}
`

var (
	approver = api.Peer{UID: 4242, GID: 4242, PID: 10, Process: "host"}
	someone  = api.Peer{UID: 1000, GID: 1000, PID: 11, Process: "host"}
)

type realService struct {
	svc   *service.Service
	rt    *servicetest.Runtime
	audit *servicetest.Auditor
	// the parts, for a daemon over the same skills and stores
	opts service.Options
}

func newRealService(t *testing.T) *realService { return newRealServiceWith(t, serviceConfig) }

// newRealServiceWith serves hello, guarded-deploy and the extra skills
// under config.
func newRealServiceWith(t *testing.T, config string, extra ...*skills.Skill) *realService {
	t.Helper()
	cfg, err := policy.Parse([]byte(config), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	idx := servicetest.NewIndex(append([]*skills.Skill{
		servicetest.MakeSkill(t, root, servicetest.SkillSpec{Name: "hello", Files: map[string]string{
			"scripts/run.sh": "echo hi\n", "references/a.md": "reference A\n",
		}}),
		servicetest.MakeSkill(t, root, servicetest.SkillSpec{Name: "guarded-deploy", Files: map[string]string{"scripts/deploy.sh": "echo deploying\n"}}),
	}, extra...)...)
	st, err := store.OpenStateDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := &servicetest.Runtime{}
	au := &servicetest.Auditor{}
	j := audit.NewJournal(au, nil)
	eng := runner.New(runner.Options{Config: cfg, Images: &servicetest.Images{}, Runtime: rt, Audit: j, Pins: servicetest.LivePins{}})
	opts := service.Options{
		Config: cfg, Skills: idx, Engine: eng, Audit: j,
		Sessions:      store.NewSessionStore(st, store.SessionOptions{}),
		Confirmations: store.NewConfirmationStore(st, store.ConfirmationOptions{}),
	}
	return &realService{svc: service.New(opts), rt: rt, audit: au, opts: opts}
}

func TestRealService(t *testing.T) {
	rs := newRealService(t)
	rs.rt.RunFunc = func(_ context.Context, job runtime.Job) (*runtime.Result, error) {
		return &runtime.Result{Stderr: []byte("boom\n"), Summary: outcome.Summary{ExitCode: 3, Reason: runtime.ReasonExit, Runtime: "fake"}}, nil
	}
	cs := connect(t, rs.svc, mcp.Options{Caller: someone}, nil)
	call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"hello"}})

	res := call(t, cs, mcp.ToolRead, map[string]any{"path": "../guarded-deploy/SKILL.md"})
	if !res.IsError || !strings.HasPrefix(text(res), "invalid_params: ") {
		t.Errorf("read outside the skill: isError=%v %q", res.IsError, text(res))
	}

	res = call(t, cs, mcp.ToolRunScript, map[string]any{"path": "scripts/run.sh"})
	var rr api.RunScriptResult
	structured(t, res, &rr)
	if !res.IsError || rr.ExitCode != 3 || rr.Stderr != "boom\n" || rr.RunID == "" {
		t.Errorf("failing run: isError=%v %+v", res.IsError, rr)
	}

	p, err := cs.GetPrompt(context.Background(), &sdk.GetPromptParams{Name: "hello", Arguments: map[string]string{mcp.PromptArgument: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Messages[0].Content.(*sdk.TextContent).Text; !strings.Contains(got, "Use scripts/run.py for hello.") || !strings.HasSuffix(got, "ARGUMENTS: x\n") {
		t.Errorf("prompt = %q", got)
	}
	if len(rs.audit.Events("run.end")) == 0 && len(rs.audit.Records()) == 0 {
		t.Error("the service audited nothing")
	}
}

func TestRealServiceConfirmation(t *testing.T) {
	for _, tt := range []struct {
		name      string
		caller    api.Peer
		action    string
		wantRun   bool
		wantError string
	}{
		{"approver accepts", approver, "accept", true, ""},
		{"approver declines", approver, "decline", false, "denied: the user declined the run at the client; confirmation "},
		{"non-approver accepts", someone, "accept", false, "ask an approver to approve confirmation "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := newRealService(t)
			cs := connect(t, rs.svc, mcp.Options{Caller: tt.caller, ElicitApprovals: true}, &sdk.ClientOptions{
				ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					if tt.action == "accept" {
						return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
					}
					return &sdk.ElicitResult{Action: tt.action}, nil
				},
			})
			call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"guarded-deploy"}})
			res := call(t, cs, mcp.ToolRunScript, map[string]any{"path": "scripts/deploy.sh", "args": []string{"prod"}})
			ran := len(rs.rt.Jobs()) > 0
			if ran != tt.wantRun {
				t.Errorf("ran = %v, want %v (result %q)", ran, tt.wantRun, text(res))
			}
			if tt.wantError == "" && res.IsError || tt.wantError != "" && (!res.IsError || !strings.Contains(text(res), tt.wantError)) {
				t.Errorf("result isError=%v %q, want error %q", res.IsError, text(res), tt.wantError)
			}
		})
	}
}

// skills_run_code over the real service: the code runs with the loaded
// skill mounted, and the result names where.
func TestRealServiceRunCode(t *testing.T) {
	rs := newRealServiceWith(t, strings.Replace(serviceConfig, `"skills.run_script"]`, `"skills.run_script", "skills.run_code"]`, 1))
	cs := connect(t, rs.svc, mcp.Options{Caller: someone}, nil)
	call(t, cs, mcp.ToolLoad, map[string]any{"names": []string{"hello"}})
	res := call(t, cs, mcp.ToolRunCode, map[string]any{"language": "python", "code": "import scripts\n", "args": []string{"a"}})
	var rr api.RunScriptResult
	structured(t, res, &rr)
	if res.IsError || len(rr.Skills) != 1 || rr.Skills[0].Path != "/skills/hello" || rr.Path != "/skills/.code/main.py" {
		t.Fatalf("run_code: isError=%v %q %+v", res.IsError, text(res), rr)
	}
	jobs := rs.rt.Jobs()
	if len(jobs) != 1 || jobs[0].Sandbox.Program == nil || string(jobs[0].Sandbox.Program.Data) != "import scripts\n" || len(jobs[0].Sandbox.Skills) != 1 {
		t.Errorf("jobs %+v", jobs)
	}
}
