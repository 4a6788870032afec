package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
)

const egressConfig = serviceConfig + `
secret "API_TOKEN" {
  from_env = "SKILLBOX_SERVICE_TEST_TOKEN"
  hosts    = ["api.example.com"]
}
policy "api" {
  skills = ["web", "web-ask"]
  egress = ["api.example.com:443"]
  # Even a name the env allowlist lets through cannot set a secret.
  env    = ["API_TOKEN"]
}
policy "api-more" {
  skills = ["web-ask"]
  egress = ["*.example.org:443"]
  confirm = ["network"]
}
`

// A run of a skill with egress destinations gets them as its job's
// egress (and no full network); confirm = ["network"] asks once per
// session, skill and destinations, with the destinations in the digest;
// each attempt the runtime reports becomes an egress.connect record.
func TestRunEgress(t *testing.T) {
	more := []servicetest.SkillSpec{
		{Name: "web", Files: map[string]string{"scripts/run.sh": "echo hi\n"}},
		{Name: "web-ask", Files: map[string]string{"scripts/run.sh": "echo hi\n"}},
	}
	f := newFixtureWith(t, true, egressConfig, more)
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		if job.Sandbox.Egress != nil && job.Sandbox.Egress.Report != nil {
			job.Sandbox.Egress.Report(egress.Attempt{Kind: "connect", Host: "api.example.com", Port: 443, Allowed: true, Rule: "r", Out: 10, In: 20})
			job.Sandbox.Egress.Report(egress.Attempt{Kind: "connect", Host: "evil.example.com", Port: 443, Rule: "none", Reason: "no"})
		}
		return &runtime.Result{Egress: &egress.Stats{Connections: 1, Denied: 1}, Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	t.Setenv("SKILLBOX_SERVICE_TEST_TOKEN", "value-of-the-token")
	ctx := context.Background()
	ses, err := f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(skill, confirmation string) (*service.Finished, error) {
		return f.svc.Run(ctx, owner, service.RunRequest{Skill: f.sk[skill], Script: "scripts/run.sh"},
			service.RunOptions{Method: "test", SessionID: ses.SessionID, ConfirmationID: confirmation})
	}

	out, err := run("web", "")
	if err != nil {
		t.Fatal(err)
	}
	jobs := f.rt.Jobs()
	job := jobs[len(jobs)-1]
	if job.Sandbox.Network || job.Sandbox.Egress == nil || len(job.Sandbox.Egress.Rules) != 1 || job.Sandbox.Egress.Rules[0].String() != "api.example.com:443" ||
		!strings.Contains(job.Sandbox.Egress.Rules[0].Source, `policy "api"`) {
		t.Fatalf("job network %v egress %+v", job.Sandbox.Network, job.Sandbox.Egress)
	}
	if s := job.Sandbox.Egress.Secrets; len(s) != 1 || s[0].Value != "value-of-the-token" || s[0].Header != "Authorization: Bearer %s" || job.Sandbox.Egress.CA == nil {
		t.Fatalf("job secrets %+v CA %v", s, job.Sandbox.Egress.CA)
	}
	for _, e := range job.Invocation.Env {
		if strings.Contains(e, "value-of-the-token") {
			t.Fatalf("the secret is in the job's env: %q", e)
		}
	}
	for _, r := range f.audit.Events(audit.EventRunStart) {
		if raw := fmt.Sprintf("%+v", *r.Run); strings.Contains(raw, "value-of-the-token") || len(r.Run.EgressSecrets) != 1 {
			t.Fatalf("run.start: %s", raw)
		}
	}
	recs := f.audit.Events(audit.EventEgress)
	if len(recs) != 2 || recs[0].Egress.RunID != out.RunID || recs[0].Outcome != audit.OutcomeOK || recs[1].Outcome != audit.OutcomeDenied ||
		recs[0].Skill == nil || recs[0].Skill.Name != "web" || recs[0].SessionID != ses.SessionID {
		t.Fatalf("egress records %+v", recs)
	}
	ends := f.audit.Events(audit.EventRunEnd)
	if e := ends[len(ends)-1]; e.Run.EgressStats == nil || e.Run.EgressStats.Denied != 1 || len(e.Run.Egress) != 1 {
		t.Errorf("run.end %+v", e.Run)
	}

	// web-ask: the destinations of both rules, after an approver says yes.
	_, err = run("web-ask", "")
	var cr *api.ConfirmationRequiredError
	if !errors.As(err, &cr) || !strings.Contains(err.Error(), "api.example.com:443") || !strings.Contains(err.Error(), "*.example.org:443") {
		t.Fatalf("first run: %v", err)
	}
	if _, err := f.svc.ApproveConfirmation(ctx, approver, api.ConfirmationIDParams{ID: cr.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := run("web-ask", cr.ID); err != nil {
		t.Fatalf("approved run: %v", err)
	}
	// Approved once in this session: the next run goes ahead.
	if _, err := run("web-ask", ""); err != nil {
		t.Fatalf("second run in the session: %v", err)
	}
	// A caller may not set a secret's variable.
	_, err = f.svc.Run(ctx, owner, service.RunRequest{Skill: f.sk["web"], Script: "scripts/run.sh", Env: map[string]string{"API_TOKEN": "x"}},
		service.RunOptions{Method: "test", SessionID: ses.SessionID})
	if api.KindOf(err) != api.KindInvalidParams || !strings.Contains(err.Error(), "placeholder of a secret") {
		t.Errorf("env naming a secret: %v", err)
	}
	// Another session asks again.
	other, _ := f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})
	_, err = f.svc.Run(ctx, owner, service.RunRequest{Skill: f.sk["web-ask"], Script: "scripts/run.sh"},
		service.RunOptions{Method: "test", SessionID: other.SessionID})
	if !errors.As(err, &cr) {
		t.Fatalf("run in another session: %v", err)
	}
	// Closing the session forgets its approvals.
	if _, err := f.svc.CloseSession(ctx, owner, api.SessionParams{SessionID: ses.SessionID}); err != nil {
		t.Fatal(err)
	}
}

// The approval digest binds the destinations: the same run with another
// egress list has another digest.
func TestEgressInDigest(t *testing.T) {
	f := newFixtureWith(t, false, egressConfig, []servicetest.SkillSpec{{Name: "web", Files: map[string]string{"scripts/run.sh": "echo hi\n"}}})
	digest := func(config string) string {
		cfg := mustV(policyParse(config))
		eng := runner.New(runner.Options{Config: cfg, Images: &servicetest.Images{}, Runtime: f.rt, Pins: servicetest.LivePins{}})
		p, err := eng.Prepare(service.RunRequest{Skill: f.sk["web"], Script: "scripts/run.sh"})
		if err != nil {
			t.Fatal(err)
		}
		return p.Digest()
	}
	a := digest(egressConfig)
	b := digest(strings.Replace(egressConfig, `"api.example.com:443"`, `"api.example.com:8443"`, 1))
	c := digest(serviceConfig)
	if a == b || a == c || b == c {
		t.Fatalf("digests do not depend on the destinations: %s %s %s", a, b, c)
	}
}

func policyParse(src string) (*policy.Config, error) { return policy.Parse([]byte(src), "service.hcl") }

// An aggregate the proxy reports (attempts past the run's or
// the uid's budget) is recorded with outcome aggregated and its counts;
// each run's egress gets its uid's shared budget.
func TestRunEgressAggregateRecord(t *testing.T) {
	more := []servicetest.SkillSpec{{Name: "web", Files: map[string]string{"scripts/run.sh": "echo hi\n"}}}
	f := newFixtureWith(t, true, egressConfig, more)
	f.rt.RunFunc = func(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
		if job.Sandbox.Egress == nil || job.Sandbox.Egress.UIDBudget == nil {
			return nil, fmt.Errorf("job egress without a uid budget: %+v", job.Sandbox.Egress)
		}
		job.Sandbox.Egress.Report(egress.Attempt{Kind: "aggregate", Rule: "aggregate", Count: 500,
			Aggregate: []egress.AttemptCount{{Kind: "connect", Host: "evil.example.com", Port: 443, Reason: "no", Count: 500}}})
		return &runtime.Result{Egress: &egress.Stats{Denied: 500}, Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	t.Setenv("SKILLBOX_SERVICE_TEST_TOKEN", "value-of-the-token")
	ctx := context.Background()
	ses, err := f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Run(ctx, owner, service.RunRequest{Skill: f.sk["web"], Script: "scripts/run.sh"},
		service.RunOptions{Method: "test", SessionID: ses.SessionID}); err != nil {
		t.Fatal(err)
	}
	recs := f.audit.Events(audit.EventEgress)
	if len(recs) != 1 || recs[0].Outcome != audit.OutcomeAggregated || recs[0].Egress.Count != 500 || len(recs[0].Egress.Aggregate) != 1 {
		t.Fatalf("egress records %+v", recs)
	}
}
