package store

import (
	"errors"
	"fmt"
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
	kvA, kvB := twoReplicas(t)

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

// TestReplicasSweepOnce: replicas sweeping the same expired records at once
// each record's expiry is reported by exactly one of them (the one whose
// compare-and-swap wrote it), never twice and never lost.
func TestReplicasSweepOnce(t *testing.T) {
	kvA, kvB := twoReplicas(t)
	clk := newClock()
	var mu sync.Mutex
	sesGone, cnfGone := map[string]int{}, map[string]int{}
	sesHook := func(s Session) { mu.Lock(); sesGone[s.ID]++; mu.Unlock() }
	cnfHook := func(c api.Confirmation) { mu.Lock(); cnfGone[c.ID]++; mu.Unlock() }
	so := SessionOptions{TTL: time.Hour, MaxPerOwner: -1, Now: clk.Now, OnExpire: sesHook}
	co := ConfirmationOptions{MaxPendingPerOwner: -1, Now: clk.Now, OnExpire: cnfHook}
	sA, sB := NewSessionStore(kvA, so), NewSessionStore(kvB, so)
	cA, cB := NewConfirmationStore(kvA, co), NewConfirmationStore(kvB, co)
	const n = 20
	var kept string
	for i := range n {
		s, err := sA.Create(7)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cA.Request(s.ID, 7, fmt.Sprintf("sha256:%d", i), "r", "rule", time.Minute); err != nil {
			t.Fatal(err)
		}
		kept = s.ID
	}
	clk.Advance(50 * time.Minute)
	if _, err := sB.Get(kept, 7); err != nil { // used on B only: B's sweep writes the use
		t.Fatal(err)
	}
	clk.Advance(20 * time.Minute)
	var wg sync.WaitGroup
	for _, f := range []func() error{
		func() error { _, err := sA.Sweep(); return err },
		func() error { _, err := sB.Sweep(); return err },
		func() error { _, err := cA.Sweep(); return err },
		func() error { _, err := cB.Sweep(); return err },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(cnfGone) != n {
		t.Errorf("%d confirmations reported expired, want %d", len(cnfGone), n)
	}
	for id, k := range cnfGone {
		if k != 1 {
			t.Errorf("confirmation %s reported expired %d times", id, k)
		}
	}
	for id, k := range sesGone {
		if k != 1 {
			t.Errorf("session %s reported expired %d times", id, k)
		}
	}
	// A's sweep may have run before B's wrote the use of kept: then A
	// expired it, which is what A saw. Otherwise kept survives.
	want := n - 1
	if sesGone[kept] == 1 {
		want = n
	} else if _, err := sA.Get(kept, 7); err != nil {
		t.Errorf("the session B used, on A after both sweeps: %v", err)
	}
	if len(sesGone) != want {
		t.Errorf("%d sessions reported expired, want %d", len(sesGone), want)
	}
}

// twoReplicas are two etcd clients under one prefix: two daemons' stores.
func twoReplicas(t *testing.T) (KV, KV) {
	t.Helper()
	if etcdURL == "" {
		t.Skip(etcdMissing)
	}
	dir := t.TempDir()
	be := backends[1]
	kvA, kvB := be.open(t, dir), be.open(t, dir)
	t.Cleanup(func() { kvA.Close(); kvB.Close() })
	return kvA, kvB
}
