package store

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
)

// TestReplicasShareState: two stores on two etcd clients under one prefix
// are two daemons serving the same hosts. A session made on one is used on
// the other; an approval consumed on one is refused on the other, and of
// two consuming at once exactly one wins.
func TestReplicasShareState(t *testing.T) {
	if etcdURL == "" {
		t.Skip(etcdMissing)
	}
	dir := t.TempDir()
	be := backends[1]
	kvA, kvB := be.open(t, dir), be.open(t, dir)
	defer kvA.Close()
	defer kvB.Close()

	sesA, sesB := NewSessionStore(kvA, SessionOptions{}), NewSessionStore(kvB, SessionOptions{})
	s, err := sesA.Create(1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := sesB.Update(s.ID, 1000, func(x *Session) error {
		x.Active = append(x.Active, ActiveSkill{Name: "pdf", Digest: "sha256:aa"})
		return nil
	}); err != nil {
		t.Fatalf("session made on A, updated on B: %v", err)
	}
	if got, err := sesA.Get(s.ID, 1000); err != nil || len(got.Active) != 1 {
		t.Fatalf("B's change seen on A: %+v, %v", got, err)
	}
	if _, err := sesB.Get(s.ID, 1001); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("another uid on B: %v", err)
	}

	cA, cB := NewConfirmationStore(kvA, ConfirmationOptions{}), NewConfirmationStore(kvB, ConfirmationOptions{})
	c, err := cA.Request(s.ID, 1000, "sha256:d", "r", "rule", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cB.Approve(c.ID, approver); err != nil {
		t.Fatalf("approving on B what A asked: %v", err)
	}
	if err := cA.Consume(c.ID, s.ID, "sha256:d"); err != nil {
		t.Fatalf("consume on A: %v", err)
	}
	if err := cB.Consume(c.ID, s.ID, "sha256:d"); !errors.Is(err, ErrConfirmationUsed) {
		t.Fatalf("consume on B after A used it: %v, want %v", err, ErrConfirmationUsed)
	}

	for i := range 50 {
		c, err := cA.Request(s.ID, 1000, "sha256:race", "r", "rule", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cA.Approve(c.ID, approver); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, cs := range []*ConfirmationStore{cA, cB} {
			wg.Add(1)
			go func() { defer wg.Done(); errs[j] = cs.Consume(c.ID, s.ID, "sha256:race") }()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, ErrConfirmationUsed):
				t.Fatalf("round %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d replicas ran the approved request (%v), want exactly 1", i, won, errs)
		}
	}
}
