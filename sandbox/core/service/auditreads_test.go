package service

import (
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
)

func TestAuditReadCaps(t *testing.T) {
	var a auditReads
	take := func(uid uint32, approver bool) (func(), error) {
		return a.acquire(api.Peer{UID: uid}, approver)
	}
	var held []func()
	mustTake := func(uid uint32, approver bool) {
		t.Helper()
		rel, err := take(uid, approver)
		if err != nil {
			t.Fatalf("uid %d: %v", uid, err)
		}
		held = append(held, rel)
	}
	t.Run("per uid", func(t *testing.T) {
		mustTake(1000, false)
		mustTake(1000, false)
		_, err := take(1000, false)
		if api.KindOf(err) != api.KindLimitExceeded {
			t.Fatalf("third read of one uid: %v, want limit_exceeded", err)
		}
		t.Logf("refusal: %v", err)
	})
	t.Run("total keeps a reserve for approvers", func(t *testing.T) {
		mustTake(1001, false)
		mustTake(1001, false)
		mustTake(1002, false)
		mustTake(1002, false)
		if _, err := take(1003, false); api.KindOf(err) != api.KindLimitExceeded {
			t.Fatalf("a 7th read by a non-approver: %v, want limit_exceeded", err)
		}
		mustTake(4242, true)
		mustTake(4242, true)
		if _, err := take(4243, true); api.KindOf(err) != api.KindLimitExceeded {
			t.Fatalf("a 9th read: %v, want limit_exceeded", err)
		}
	})
	t.Run("released slots are free again", func(t *testing.T) {
		for _, rel := range held {
			rel()
		}
		if a.total != 0 || len(a.byUID) != 0 {
			t.Fatalf("after release: total %d, %v", a.total, a.byUID)
		}
		mustTake(1003, false)
	})
}
