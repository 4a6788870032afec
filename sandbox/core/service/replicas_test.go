package service_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/core/store"
	"github.com/skillbox/skillbox/sandbox/core/store/storetest"
)

// TestReplicasOverEtcd: the state shared by replicas, end to end: two
// services (two daemons' worth, each with its own stores and etcd client)
// over one etcd serve the same hosts. A session created on A is used on B;
// an approval granted on B and used on A is refused on B; and of A and B
// running one approved request at once, exactly one runs it (50 rounds).
func TestReplicasOverEtcd(t *testing.T) {
	bin, err := storetest.EtcdBinary(false)
	if err != nil || bin == "" {
		t.Skipf("no etcd binary (%v): set SKILLBOX_ETCD or run hack/kube.sh etcd-bin", err)
	}
	url := storetest.StartEtcd(t, bin)
	replica := func(fa *fixture) (*fixture, *store.EtcdKV) {
		kv, err := store.OpenEtcd(store.EtcdOptions{Endpoints: []string{url}, Prefix: "/skillbox-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kv.Close() })
		f := newFixtureOpts(t, false, serviceConfig, nil, func(o *service.Options) {
			o.Sessions = store.NewSessionStore(kv, store.SessionOptions{})
			o.Confirmations = store.NewConfirmationStore(kv, store.ConfirmationOptions{})
			o.Locker = kv
			if fa != nil {
				o.Skills = fa.idx // the same skills on the same hosts
			}
		})
		return f, kv
	}
	a, _ := replica(nil)
	b, _ := replica(a)
	ctx := context.Background()

	sid := mustV(a.svc.CreateSession(ctx, owner, api.CreateSessionParams{})).SessionID
	if _, err := b.svc.LoadSkills(ctx, owner, api.LoadParams{SessionID: sid, Names: []string{"plain", "guarded"}}); err != nil {
		t.Fatalf("session made on A, used on B: %v", err)
	}
	if _, err := b.svc.LoadSkills(ctx, stranger, api.LoadParams{SessionID: sid, Names: []string{"plain"}}); api.KindOf(err) != api.KindNotFound {
		t.Fatalf("another uid's use of the session on B: %v", err)
	}
	if _, err := a.svc.RunScript(ctx, owner, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "plain", Path: "scripts/run.sh"}); err != nil {
		t.Fatalf("a skill loaded on B runs on A: %v", err)
	}

	p := api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Skill: "guarded", Path: "scripts/run.sh"}
	ask := func() string {
		t.Helper()
		_, err := a.svc.RunScript(ctx, owner, p)
		var cr *api.ConfirmationRequiredError
		if !errors.As(err, &cr) {
			t.Fatalf("want confirmation_required, got %v", err)
		}
		if _, err := b.svc.ApproveConfirmation(ctx, approver, api.ConfirmationIDParams{ID: cr.ID}); err != nil {
			t.Fatalf("approving on B what A asked: %v", err)
		}
		return cr.ID
	}
	q := p
	q.ConfirmationID = ask()
	if _, err := a.svc.RunScript(ctx, owner, q); err != nil {
		t.Fatalf("approved run on A: %v", err)
	}
	if _, err := b.svc.RunScript(ctx, owner, q); api.KindOf(err) != api.KindInvalidParams || !errors.Is(err, store.ErrConfirmationUsed) {
		t.Fatalf("the used approval on B: %v, want %v", err, store.ErrConfirmationUsed)
	}
	if na, nb := len(a.rt.Jobs()), len(b.rt.Jobs()); na != 2 || nb != 0 {
		t.Fatalf("runs: A %d, B %d; want 2, 0", na, nb)
	}

	rounds := 50
	if testing.Short() || os.Getenv("SKILLBOX_TEST_SHORT") != "" {
		rounds = 10
	}
	for i := range rounds {
		q.ConfirmationID = ask()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, f := range []*fixture{a, b} {
			wg.Add(1)
			go func() { defer wg.Done(); _, errs[j] = f.svc.RunScript(ctx, owner, q) }()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrConfirmationUsed):
				t.Fatalf("round %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: the approved request ran %d times (%v), want once", i, won, errs)
		}
	}
	if n := len(a.rt.Jobs()) + len(b.rt.Jobs()); n != 2+rounds {
		t.Fatalf("%d runs in all, want %d", n, 2+rounds)
	}
}
