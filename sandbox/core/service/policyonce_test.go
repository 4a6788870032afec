package service_test

import (
	"context"
	"testing"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service"
)

// onceConfig gives a skill network and a confirmation on it, so a run
// asks policy about its tool, its network and its plan.
const onceConfig = codeConfig + `
policy "net" {
  skills  = ["plain"]
  network = true
  confirm = ["network"]
}
`

// TestRunMatchesPolicyOnce: a run matches the rules once per skill it
// mounts, whatever it is decided on (the tool, network, the plan's
// limits, environment and isolation).
func TestRunMatchesPolicyOnce(t *testing.T) {
	var cfg *policy.Config
	f := newFixtureOpts(t, true, onceConfig, codeSkills, func(o *service.Options) { cfg = o.Config })
	ctx := context.Background()
	sid := f.session(t, "plain", "gif", "pdf")
	for _, tc := range []struct {
		name string
		run  func() error
		want uint64
	}{
		{"script", func() error {
			_, err := f.svc.RunScript(ctx, owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Env: map[string]string{"MODE": "x"}}, Skill: "gif", Path: "core/gif.py"})
			return err
		}, 1},
		{"script with network held for confirmation", func() error {
			_, err := f.svc.RunScript(ctx, owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "plain", Path: "scripts/run.sh", Network: true})
			if asConfirmation(err, new(*api.ConfirmationRequiredError)) {
				return nil
			}
			return err
		}, 1},
		{"code with three skills", func() error {
			_, err := f.svc.RunCode(ctx, owner, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: api.LanguagePython, Code: "print(1)\n"})
			return err
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cfg.RulePasses()
			if err := tc.run(); err != nil {
				t.Fatal(err)
			}
			if got := cfg.RulePasses() - before; got != tc.want {
				t.Errorf("the run matched the rules %d times, want %d (once per skill it mounts)", got, tc.want)
			}
		})
	}
}
