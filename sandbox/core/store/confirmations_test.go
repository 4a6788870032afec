package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
)

var approver = api.Peer{UID: 0, GID: 0, PID: 1, Process: "skillbox"}

func newConfirmations(t *testing.T, b backend, clk *fakeClock) (*ConfirmationStore, KV, string) {
	t.Helper()
	dir := t.TempDir()
	st := b.open(t, dir)
	t.Cleanup(func() { st.Close() })
	return NewConfirmationStore(st, ConfirmationOptions{Now: clk.Now}), st, dir
}

func TestConfirmationApproveConsumeSingleUse(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		clk := newClock()
		cs, _, _ := newConfirmations(t, b, clk)
		digest := RequestDigest("skill", "pdf", "args", "a b")
		c, err := cs.Request("ses_1", 1000, digest, "network access", "skillbox.hcl:12", time.Minute,
			WithDetails(map[string]string{"script": "scripts/fetch.py"}))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(c.ID, "cnf_") || c.State != api.ConfirmationPending || c.Details["script"] != "scripts/fetch.py" {
			t.Fatalf("request: %+v", c)
		}
		// Repeating the call before approval returns the same request.
		again, _ := cs.Request("ses_1", 1000, digest, "network access", "skillbox.hcl:12", time.Minute)
		if again.ID != c.ID {
			t.Fatalf("duplicate request got a new id")
		}

		// Pending: the error carries the id again.
		err = cs.Consume(c.ID, "ses_1", digest)
		if !errors.Is(err, api.ErrConfirmationPending) || api.KindOf(err) != api.KindConfirmationRequired {
			t.Fatalf("consume pending: %v (kind %s)", err, api.KindOf(err))
		}
		if d := api.ErrorData(err); d["confirmation_id"] != c.ID {
			t.Fatalf("pending error data: %v", d)
		}

		a, err := cs.Approve(c.ID, approver)
		if err != nil || a.State != api.ConfirmationApproved || a.DecidedBy == nil || a.DecidedBy.PID != 1 {
			t.Fatalf("Approve = %+v, %v", a, err)
		}
		if _, err := cs.Approve(c.ID, approver); !errors.Is(err, ErrConfirmationDecided) {
			t.Fatalf("second approve: %v", err)
		}
		if err := cs.Consume(c.ID, "ses_1", digest); err != nil {
			t.Fatalf("Consume: %v", err)
		}
		err = cs.Consume(c.ID, "ses_1", digest)
		if !errors.Is(err, ErrConfirmationUsed) || api.KindOf(err) != api.KindInvalidParams {
			t.Fatalf("second Consume: %v", err)
		}
		got, _ := cs.Get(c.ID)
		if got.State != api.ConfirmationUsed || got.UsedAt == nil {
			t.Fatalf("after use: %+v", got)
		}
	})
}

func TestConfirmationExpired(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		clk := newClock()
		cs, _, _ := newConfirmations(t, b, clk)
		c, _ := cs.Request("ses_1", 1, "sha256:d", "r", "rule", time.Minute)
		cs.Approve(c.ID, approver)
		clk.Advance(61 * time.Second)
		err := cs.Consume(c.ID, "ses_1", "sha256:d")
		if !errors.Is(err, ErrConfirmationExpired) {
			t.Fatalf("expired approval: %v", err)
		}
		// Expiry is final, even for the approver.
		if _, err := cs.Approve(c.ID, approver); err == nil {
			t.Fatal("approved an expired confirmation")
		}
		l, _ := cs.List(ConfirmationFilter{State: "expired"})
		if len(l) != 1 || l[0].ID != c.ID {
			t.Fatalf("List(expired) = %v", l)
		}
		// An unapproved one also expires.
		p, _ := cs.Request("ses_1", 1, "sha256:e", "r", "rule", time.Minute)
		clk.Advance(2 * time.Minute)
		if _, err := cs.Approve(p.ID, approver); !errors.Is(err, ErrConfirmationExpired) {
			t.Fatalf("approve after expiry: %v", err)
		}
	})
}

func TestConfirmationMismatch(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		clk := newClock()
		cs, _, _ := newConfirmations(t, b, clk)
		d := RequestDigest("args", "--safe")
		c, _ := cs.Request("ses_1", 1, d, "r", "rule", 0)
		cs.Approve(c.ID, approver)
		err := cs.Consume(c.ID, "ses_1", RequestDigest("args", "--rm -rf"))
		if !errors.Is(err, ErrConfirmationMismatch) {
			t.Fatalf("other digest: %v", err)
		}
		if err := cs.Consume(c.ID, "ses_2", d); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("other session: %v", err)
		}
		// The approval survives those attempts for the exact call.
		if err := cs.Consume(c.ID, "ses_1", d); err != nil {
			t.Fatalf("exact call after mismatches: %v", err)
		}
		if err := cs.Consume("cnf_nope", "ses_1", d); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
	})
}

func TestConfirmationDenyFinal(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		clk := newClock()
		cs, _, _ := newConfirmations(t, b, clk)
		c, _ := cs.Request("ses_1", 1, "sha256:d", "r", "rule", 0)
		d, err := cs.Deny(c.ID, approver)
		if err != nil || d.State != api.ConfirmationDenied {
			t.Fatalf("Deny = %+v, %v", d, err)
		}
		if _, err := cs.Approve(c.ID, approver); !errors.Is(err, ErrConfirmationDecided) {
			t.Fatalf("approve after deny: %v", err)
		}
		err = cs.Consume(c.ID, "ses_1", "sha256:d")
		if !errors.Is(err, ErrConfirmationDenied) || api.KindOf(err) != api.KindDenied {
			t.Fatalf("consume denied: %v (%s)", err, api.KindOf(err))
		}
		// An approval can be withdrawn before use.
		c2, _ := cs.Request("ses_1", 1, "sha256:e", "r", "rule", 0)
		cs.Approve(c2.ID, approver)
		if _, err := cs.Deny(c2.ID, approver); err != nil {
			t.Fatalf("withdraw approval: %v", err)
		}
		if err := cs.Consume(c2.ID, "ses_1", "sha256:e"); !errors.Is(err, ErrConfirmationDenied) {
			t.Fatalf("consume withdrawn: %v", err)
		}
	})
}

func TestConfirmationConcurrentConsumeOnce(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		clk := newClock()
		cs, _, _ := newConfirmations(t, b, clk)
		c, _ := cs.Request("ses_1", 1, "sha256:d", "r", "rule", 0)
		cs.Approve(c.ID, approver)
		var ok, used atomic.Int32
		var wg sync.WaitGroup
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch err := cs.Consume(c.ID, "ses_1", "sha256:d"); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrConfirmationUsed):
					used.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 1 || used.Load() != 39 {
			t.Fatalf("%d consumes succeeded, %d saw used", ok.Load(), used.Load())
		}
	})
}

func TestConfirmationsPersistAndSweep(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		clk := newClock()
		cs, st, dir := newConfirmations(t, b, clk)
		c, _ := cs.Request("ses_1", 1, "sha256:d", "r", "rule", time.Hour)
		cs.Approve(c.ID, approver)
		st.Close()

		st = b.open(t, dir)
		defer st.Close()
		cs = NewConfirmationStore(st, ConfirmationOptions{Now: clk.Now, Retention: time.Hour})
		if err := cs.Consume(c.ID, "ses_1", "sha256:d"); err != nil {
			t.Fatalf("approval lost across reopen: %v", err)
		}
		p, _ := cs.Request("ses_2", 2, "sha256:x", "r", "rule", time.Minute)
		uid := uint32(2)
		if l, _ := cs.List(ConfirmationFilter{OwnerUID: &uid, State: "pending"}); len(l) != 1 || l[0].ID != p.ID {
			t.Fatalf("List(uid 2, pending) = %v", l)
		}
		clk.Advance(30 * time.Minute)
		if n, err := cs.Sweep(); err != nil || n != 0 {
			t.Fatalf("early sweep deleted %d (%v)", n, err)
		}
		if g, _ := cs.Get(p.ID); g.State != api.ConfirmationExpired {
			t.Fatalf("sweep did not expire: %v", g.State)
		}
		clk.Advance(2 * time.Hour)
		if n, err := cs.Sweep(); err != nil || n != 2 {
			t.Fatalf("late sweep deleted %d (%v), want 2", n, err)
		}
		if l, _ := cs.List(ConfirmationFilter{}); len(l) != 0 {
			t.Fatalf("left after sweep: %v", l)
		}
	})
}

func TestConfirmationPendingLimit(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		clk := newClock()
		dir := t.TempDir()
		st := b.open(t, dir)
		defer st.Close()
		cs := NewConfirmationStore(st, ConfirmationOptions{Now: clk.Now, MaxPendingPerOwner: 3})
		for i := range 3 {
			if _, err := cs.Request("ses_1", 1, fmt.Sprintf("sha256:%d", i), "r", "rule", 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cs.Request("ses_1", 1, "sha256:x", "r", "rule", 0); !errors.Is(err, api.ErrLimitExceeded) {
			t.Fatalf("fourth pending: %v", err)
		}
		if _, err := cs.Request("ses_1", 1, "", "r", "rule", 0); !errors.Is(err, api.ErrInvalidParams) {
			t.Fatalf("empty digest: %v", err)
		}
	})
}

func TestRequestDigest(t *testing.T) {
	a := RequestDigest("args", "a b", "env", "X=1")
	if a != RequestDigest("args", "a b", "env", "X=1") {
		t.Fatal("not deterministic")
	}
	if !strings.HasPrefix(a, "sha256:") || len(a) != len("sha256:")+64 {
		t.Fatalf("format %q", a)
	}
	// Field boundaries matter: no concatenation ambiguity.
	pairs := [][]string{
		{"ab", "c"}, {"a", "bc"}, {"abc"}, {"abc", ""}, {"", "abc"}, {},
		{"args", "a b"}, {"args", "a", "b"}, {"a\x00b"}, {"a", "b"},
	}
	seen := map[string][]string{}
	for _, p := range pairs {
		d := RequestDigest(p...)
		if prev, dup := seen[d]; dup {
			t.Fatalf("%q and %q hash the same", prev, p)
		}
		seen[d] = p
	}
	// Pinned value: the canonical encoding must not change silently, or
	// approvals made before an upgrade would stop matching.
	if got := RequestDigest("skill", "pdf"); got != "sha256:"+pinnedDigest {
		t.Fatalf("RequestDigest(skill, pdf) = %s; the encoding changed", got)
	}
}

// pinnedDigest is RequestDigest("skill", "pdf"), computed independently from
// the documented encoding: sha256("skillbox/request-digest/v1\n" 0x05 "skill" 0x03 "pdf").
const pinnedDigest = "9168eeeacd36d57d97a238d8f9aceb4e7837167eaa5bd5e0bac3e019431455b7"

// OnExpire hears of each confirmation once, when its expiry is recorded:
// by Sweep, or by the Approve, Deny or Consume that finds it timed out.
func TestConfirmationExpireHookOncePerConfirmation(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		clk := newClock()
		st := b.open(t, t.TempDir())
		t.Cleanup(func() { st.Close() })
		var mu sync.Mutex
		seen := map[string][]string{}
		note := func(tag string) func(api.Confirmation) {
			return func(c api.Confirmation) {
				mu.Lock()
				defer mu.Unlock()
				if c.State != api.ConfirmationExpired {
					t.Errorf("hook got state %s", c.State)
				}
				seen[c.ID] = append(seen[c.ID], tag)
			}
		}
		cs := NewConfirmationStore(st, ConfirmationOptions{Now: clk.Now, OnExpire: note("opt")})
		cs.AddExpireHook(note("added"))

		req := func(d string) *api.Confirmation {
			c, err := cs.Request("ses_1", 1, d, "r", "rule", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		byApprove, byDeny, byConsume, bySweep, used := req("sha256:a"), req("sha256:b"), req("sha256:c"), req("sha256:d"), req("sha256:e")
		cs.Approve(byConsume.ID, approver)
		cs.Approve(used.ID, approver)
		if err := cs.Consume(used.ID, "ses_1", "sha256:e"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute)
		if _, err := cs.Approve(byApprove.ID, approver); !errors.Is(err, ErrConfirmationExpired) {
			t.Fatalf("approve: %v", err)
		}
		if _, err := cs.Deny(byDeny.ID, approver); !errors.Is(err, ErrConfirmationExpired) {
			t.Fatalf("deny: %v", err)
		}
		if err := cs.Consume(byConsume.ID, "ses_1", "sha256:c"); !errors.Is(err, ErrConfirmationExpired) {
			t.Fatalf("consume: %v", err)
		}
		// Looking again, and sweeping twice, reports nothing new.
		cs.Approve(byApprove.ID, approver)
		cs.Consume(byConsume.ID, "ses_1", "sha256:c")
		cs.Get(bySweep.ID)
		cs.List(ConfirmationFilter{})
		for i := 0; i < 2; i++ {
			if _, err := cs.Sweep(); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, c := range []*api.Confirmation{byApprove, byDeny, byConsume, bySweep} {
			if got := strings.Join(seen[c.ID], ","); got != "opt,added" {
				t.Errorf("%s: hooks %q, want once each", c.ID, got)
			}
		}
		if len(seen[used.ID]) != 0 || len(seen) != 4 {
			t.Errorf("hooks for confirmations that did not expire: %v", seen)
		}
	})
}
