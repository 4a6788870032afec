package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/runner"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
)

// withSessionSandboxes gives the fixture's service an engine that keeps
// session sandboxes (with no backend: none is ever booted), so runs.*
// get past "no session sandboxes" to their own checks.
func withSessionSandboxes(o *service.Options) {
	o.Engine = runner.New(runner.Options{Config: o.Config, Images: &servicetest.Images{}, Runtime: &servicetest.Runtime{},
		Audit: o.Audit, Pins: servicetest.LivePins{}, Sessions: runner.NewSessionSandboxes(runner.SessionOptions{}, o.Audit, nil)})
}

// TestSignalRunNames: runs.signal takes a signal's name with or without
// SIG, in any case, TERM when none is given; any other name is refused
// with the list. There is no background run here, so a name that parses
// ends at "no background run" (not found), audited with the signal.
func TestSignalRunNames(t *testing.T) {
	ctx := context.Background()
	f := newFixtureOpts(t, true, serviceConfig, nil, withSessionSandboxes)
	sid := mustV(f.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	for _, tc := range []struct {
		in   string
		want string // the audited signal; "" means refused as unknown
	}{
		{"", "SIGTERM"},
		{"TERM", "SIGTERM"},
		{"term", "SIGTERM"},
		{"SIGTERM", "SIGTERM"},
		{"sigterm", "SIGTERM"},
		{"SigKill", "SIGKILL"},
		{"KILL", "SIGKILL"},
		{"int", "SIGINT"},
		{"HUP", "SIGHUP"},
		{"SIGQUIT", "SIGQUIT"},
		{"usr1", "SIGUSR1"},
		{"USR2", "SIGUSR2"},
		{"STOP", "SIGSTOP"},
		{"sigcont", "SIGCONT"},
		{"SEGV", ""},
		{"9", ""},
		{"-9", ""},
		{"SIGSIGTERM", ""},
		{" TERM", ""},
		{"TERM\n", ""},
		{"SIG TERM", ""},
		{"SIGRTMIN", ""},
		{"\x1b[31mKILL", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			before := len(f.audit.Events(audit.EventRunSignal))
			_, err := f.svc.SignalRun(ctx, owner, api.RunSignalParams{SessionID: sid, RunID: "run_none", Signal: tc.in})
			recs := f.audit.Events(audit.EventRunSignal)[before:]
			if tc.want == "" {
				if !errors.Is(err, api.ErrInvalidParams) {
					t.Fatalf("%v, want invalid params", err)
				}
				for _, name := range []string{"TERM", "INT", "HUP", "KILL", "QUIT", "USR1", "USR2", "STOP", "CONT"} {
					if !strings.Contains(err.Error(), name) {
						t.Errorf("the refusal does not list %s: %v", name, err)
					}
				}
				if len(recs) != 0 {
					t.Errorf("an unknown signal was audited as sent: %+v", recs)
				}
				return
			}
			if !errors.Is(err, api.ErrNotFound) {
				t.Fatalf("%v, want not found (no such background run)", err)
			}
			if len(recs) != 1 || recs[0].Run == nil || recs[0].Run.Signal != tc.want || recs[0].Run.RunID != "run_none" || recs[0].Outcome != audit.OutcomeRefused {
				t.Errorf("audited %+v, want one refused run.signal of %s", recs, tc.want)
			}
		})
	}
	// Another's session: refused before the signal is looked at.
	if _, err := f.svc.SignalRun(ctx, stranger, api.RunSignalParams{SessionID: sid, RunID: "run_none", Signal: "KILL"}); err == nil {
		t.Error("a stranger signalled in the owner's session")
	}
}
