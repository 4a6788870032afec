package console_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service/servicetest"
	"github.com/skillbox/skillbox/sandbox/doors/console"
)

// A confirmation of a skill changed since it was pinned shows, over the
// console API, the changed files and the script's diff against the pinned
// version; one of a skill as pinned says it matches the lock.
func TestConsoleConfirmationLockDiff(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ses, err := f.svc.CreateSession(ctx, f.me, api.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.LockSkills(ctx, f.me, api.LockParams{Names: []string{"guarded"}}); err != nil {
		t.Fatal(err)
	}
	confirmation := func(t *testing.T, arg string) *api.Confirmation {
		t.Helper()
		var cr *api.ConfirmationRequiredError
		if err := f.run(t, ses.SessionID, "guarded", arg, ""); !errors.As(err, &cr) {
			t.Fatalf("guarded: %v, want a confirmation", err)
		}
		var c api.Confirmation
		do(t, f.approverSock, "GET", console.Prefix+"/confirmations/"+cr.ID, &c)
		return &c
	}
	t.Run("matches", func(t *testing.T) {
		c := confirmation(t, "one")
		if !strings.HasPrefix(c.Details["lock"], "matches the lock") || c.Details["lock_diff"] != "" {
			t.Errorf("details %q", c.Details)
		}
	})
	t.Run("differs", func(t *testing.T) {
		sk := servicetest.MakeSkill(t, f.root, servicetest.SkillSpec{Name: "guarded", Files: map[string]string{"scripts/run.sh": "echo changed\n"}})
		f.idx.Put(sk)
		f.skills["guarded"] = sk
		c := confirmation(t, "two")
		d := c.Details
		if !strings.HasPrefix(d["lock"], "differs from the lock") || !strings.Contains(d["lock"], sk.Digest) {
			t.Errorf("lock = %q", d["lock"])
		}
		if d["lock_changes"] != "modified scripts/run.sh" {
			t.Errorf("lock_changes = %q", d["lock_changes"])
		}
		for _, s := range []string{"--- a/scripts/run.sh", "+++ b/scripts/run.sh", "-echo hi", "+echo changed"} {
			if !strings.Contains(d["lock_diff"], s) {
				t.Errorf("lock_diff lacks %q:\n%s", s, d["lock_diff"])
			}
		}
		if d["lock_notes"] != "" {
			t.Errorf("lock_notes = %q", d["lock_notes"])
		}
	})
}
